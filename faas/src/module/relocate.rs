//! Laying out a validated module in an image buffer and applying its relocations.
//!
//! The image buffer stands for the module's memory at `base`: byte `i` of the buffer is address
//! `base + i`. The kernel copies the result into the code and data VMAs (or builds the buffer
//! inside them) and then applies the segment permissions.

use super::load_plan::LoadPlan;

/// Why an image could not be populated or relocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocateError {
    /// The image buffer is smaller than the plan's `image_size`.
    ImageTooSmall,
    /// The file is shorter than a segment's file range (not the file the plan came from).
    FileTooShort,
    /// A relocation target is not 8 bytes inside the image buffer.
    OutOfBounds {
        /// The target's offset from the base.
        offset: u64,
    },
    /// `base + addend` overflows 64 bits.
    Overflow {
        /// The target's offset from the base.
        offset: u64,
    },
}

impl LoadPlan {
    /// Zeroes `image[..image_size]` and copies each segment's file bytes to its offset.
    pub fn populate(&self, file: &[u8], image: &mut [u8]) -> Result<(), RelocateError> {
        let size = usize::try_from(self.image_size).map_err(|_| RelocateError::ImageTooSmall)?;
        image
            .get_mut(..size)
            .ok_or(RelocateError::ImageTooSmall)?
            .fill(0);
        for s in &self.segments {
            let from = usize::try_from(s.file_offset).map_err(|_| RelocateError::FileTooShort)?;
            let len = usize::try_from(s.file_size).map_err(|_| RelocateError::FileTooShort)?;
            let src = from
                .checked_add(len)
                .and_then(|end| file.get(from..end))
                .ok_or(RelocateError::FileTooShort)?;
            let to = usize::try_from(s.vaddr).map_err(|_| RelocateError::ImageTooSmall)?;
            to.checked_add(len)
                .and_then(|end| image.get_mut(to..end))
                .ok_or(RelocateError::ImageTooSmall)?
                .copy_from_slice(src);
        }
        Ok(())
    }
}

/// Writes `base + addend` (little-endian) at each relocation's offset in `image`.
///
/// Every target is bounds-checked before any write happens, so on error the image is unchanged.
/// Returns the number of relocations applied.
pub fn apply_relocations(
    image: &mut [u8],
    base: u64,
    plan: &LoadPlan,
) -> Result<usize, RelocateError> {
    for r in &plan.relocations {
        let fits = usize::try_from(r.offset)
            .ok()
            .and_then(|o| o.checked_add(8))
            .is_some_and(|end| end <= image.len());
        if !fits {
            return Err(RelocateError::OutOfBounds { offset: r.offset });
        }
        base.checked_add_signed(r.addend)
            .ok_or(RelocateError::Overflow { offset: r.offset })?;
    }
    for r in &plan.relocations {
        // Checked above.
        let value = base.wrapping_add_signed(r.addend);
        let o = r.offset as usize;
        if let Some(slot) = image.get_mut(o..o + 8) {
            slot.copy_from_slice(&value.to_le_bytes());
        }
    }
    Ok(plan.relocations.len())
}

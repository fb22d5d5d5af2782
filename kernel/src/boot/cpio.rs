//! A reader for `newc` cpio archives, the format of Fjord's initrd (and Linux's initramfs).

/// One file in an archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Path inside the archive.
    pub name: &'a str,
    /// File mode bits (type and permissions).
    pub mode: u32,
    /// File contents.
    pub data: &'a [u8],
}

/// Why an archive could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpioError {
    /// A header does not start with the `070701` magic (the byte offset is given).
    BadMagic(usize),
    /// A header field is not hexadecimal.
    BadField(usize),
    /// The archive ends inside a header, name or file.
    Truncated(usize),
    /// A name is not UTF-8.
    BadName(usize),
}

const HEADER: usize = 110;

fn hex_field(b: &[u8], at: usize, field: usize) -> Result<usize, CpioError> {
    let s = &b[at + 6 + field * 8..at + 6 + field * 8 + 8];
    let s = core::str::from_utf8(s).map_err(|_| CpioError::BadField(at))?;
    usize::from_str_radix(s, 16).map_err(|_| CpioError::BadField(at))
}

/// Iterates over the files of a `newc` archive, stopping at the `TRAILER!!!` entry.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            pos: 0,
            done: false,
        }
    }

    fn next_entry(&mut self) -> Result<Option<Entry<'a>>, CpioError> {
        let at = self.pos;
        let b = self.bytes;
        if at + HEADER > b.len() {
            return Err(CpioError::Truncated(at));
        }
        if &b[at..at + 6] != b"070701" {
            return Err(CpioError::BadMagic(at));
        }
        let mode = hex_field(b, at, 1)? as u32;
        let size = hex_field(b, at, 6)?;
        let namesize = hex_field(b, at, 11)?;
        let name_end = at + HEADER + namesize;
        if namesize == 0 || name_end > b.len() {
            return Err(CpioError::Truncated(at));
        }
        let name = core::str::from_utf8(&b[at + HEADER..name_end - 1])
            .map_err(|_| CpioError::BadName(at))?;
        let data_start = name_end.next_multiple_of(4);
        let data_end = data_start
            .checked_add(size)
            .ok_or(CpioError::Truncated(at))?;
        if data_end > b.len() {
            return Err(CpioError::Truncated(at));
        }
        self.pos = data_end.next_multiple_of(4);
        if name == "TRAILER!!!" {
            return Ok(None);
        }
        Ok(Some(Entry {
            name,
            mode,
            data: &b[data_start..data_end],
        }))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Entry<'a>, CpioError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_entry() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec::Vec;

    fn push(out: &mut Vec<u8>, name: &str, data: &[u8]) {
        let h = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1,
            0o100644,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out.extend_from_slice(data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }

    #[test]
    fn reads_entries_until_trailer() {
        let mut a = Vec::new();
        push(&mut a, "fjord/README", b"hello");
        push(&mut a, "x", b"");
        push(&mut a, "TRAILER!!!", b"");
        let es: Vec<_> = Reader::new(&a).collect::<Result<_, _>>().unwrap();
        assert_eq!(es.len(), 2);
        assert_eq!(es[0].name, "fjord/README");
        assert_eq!(es[0].data, b"hello");
        assert_eq!(es[0].mode, 0o100644);
    }

    #[test]
    fn truncation_and_garbage_are_errors() {
        let mut a = Vec::new();
        push(&mut a, "file", b"0123456789");
        push(&mut a, "TRAILER!!!", b"");
        for cut in 0..a.len() - 1 {
            let r: Result<Vec<_>, _> = Reader::new(&a[..cut]).collect();
            assert!(r.is_err(), "cut at {cut} must fail");
        }
        assert_eq!(
            Reader::new(&[b'x'; 200]).next(),
            Some(Err(CpioError::BadMagic(0)))
        );
    }
}

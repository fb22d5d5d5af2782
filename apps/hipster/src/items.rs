//! [`Items`]: the contents of a cart or an order, written `<product id>:<quantity>,...`.

use core::fmt;
use fjord_libos::text::parse_u64;

use crate::data::{PRODUCTS, product_index};

/// Most distinct products in a cart.
pub const MAX_ITEMS: usize = 10;
/// Most of one product in a cart.
pub const MAX_QUANTITY: u64 = 99;

/// Products (indexes into [`PRODUCTS`]) and quantities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Items {
    entries: [(usize, u64); MAX_ITEMS],
    len: usize,
}

impl Items {
    /// Parses `ID:2,ID:1` (empty text: no items); `None` for unknown products, quantities
    /// outside `1..=MAX_QUANTITY` or too many products.
    pub fn parse(text: &[u8]) -> Option<Items> {
        let mut items = Items::default();
        for entry in text.split(|&b| b == b',').filter(|e| !e.is_empty()) {
            let colon = entry.iter().position(|&b| b == b':')?;
            let product = product_index(&entry[..colon])?;
            let quantity =
                parse_u64(&entry[colon + 1..]).filter(|q| (1..=MAX_QUANTITY).contains(q))?;
            items.add(product, quantity)?;
        }
        Some(items)
    }

    /// Adds `quantity` of product `index` (capped at [`MAX_QUANTITY`]); `None` if the cart
    /// holds [`MAX_ITEMS`] other products.
    pub fn add(&mut self, index: usize, quantity: u64) -> Option<()> {
        if let Some(e) = self.entries[..self.len].iter_mut().find(|e| e.0 == index) {
            e.1 = (e.1 + quantity).min(MAX_QUANTITY);
            return Some(());
        }
        *self.entries.get_mut(self.len)? = (index, quantity.min(MAX_QUANTITY));
        self.len += 1;
        Some(())
    }

    /// Adds every item of `other`; `None` if the result has too many products.
    pub fn merge(&mut self, other: &Items) -> Option<()> {
        other.entries[..other.len]
            .iter()
            .try_for_each(|&(i, q)| self.add(i, q))
    }

    /// The (product index, quantity) pairs.
    pub fn entries(&self) -> &[(usize, u64)] {
        &self.entries[..self.len]
    }

    /// How many products.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The total quantity.
    pub fn count(&self) -> u64 {
        self.entries().iter().map(|e| e.1).sum()
    }
}

impl fmt::Display for Items {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(p, q)) in self.entries().iter().enumerate() {
            let sep = if i > 0 { "," } else { "" };
            write!(f, "{sep}{}:{q}", PRODUCTS[p].id)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn parses_merges_and_caps() {
        let mut a = Items::parse(b"OLJCESPC7Z:2,66VCHSJNUP:1").unwrap();
        let b = Items::parse(b"OLJCESPC7Z:98,6E92ZMYYFZ:1").unwrap();
        a.merge(&b).unwrap();
        assert_eq!(a.to_string(), "OLJCESPC7Z:99,66VCHSJNUP:1,6E92ZMYYFZ:1");
        assert_eq!(a.count(), 101);
        assert_eq!(Items::parse(b"").unwrap().len(), 0);
        for bad in [
            &b"NOPE:1"[..],
            b"OLJCESPC7Z:0",
            b"OLJCESPC7Z:100",
            b"OLJCESPC7Z",
            b"OLJCESPC7Z:x",
        ] {
            assert_eq!(Items::parse(bad), None, "{bad:?}");
        }
        let mut full = Items::default();
        for i in 0..PRODUCTS.len() {
            full.add(i, 1).unwrap();
        }
        assert_eq!(full.len(), PRODUCTS.len());
    }
}

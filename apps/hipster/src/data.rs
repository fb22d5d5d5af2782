//! The in-memory data of the hipster workload: Online Boutique's product catalog
//! (`products.json`) and seed carts.

use crate::money::Money;

/// A product.
#[derive(Clone, Copy, Debug)]
pub struct Product {
    /// The product id.
    pub id: &'static str,
    /// Its name.
    pub name: &'static str,
    /// Its price.
    pub price: Money,
    /// Its categories, comma-separated.
    pub categories: &'static str,
}

const fn product(
    id: &'static str,
    name: &'static str,
    price: Money,
    categories: &'static str,
) -> Product {
    Product {
        id,
        name,
        price,
        categories,
    }
}

/// The catalog.
pub const PRODUCTS: &[Product] = &[
    product(
        "OLJCESPC7Z",
        "Sunglasses",
        Money::usd(19, 99),
        "accessories",
    ),
    product(
        "66VCHSJNUP",
        "Tank Top",
        Money::usd(18, 99),
        "clothing,tops",
    ),
    product("1YMWWN1N4O", "Watch", Money::usd(109, 99), "accessories"),
    product("L9ECAV7KIM", "Loafers", Money::usd(89, 99), "footwear"),
    product("2ZYFJ3GM2N", "Hairdryer", Money::usd(24, 99), "hair,beauty"),
    product(
        "0PUK6V6EV0",
        "Candle Holder",
        Money::usd(18, 99),
        "decor,home",
    ),
    product(
        "LS4PSXUNUM",
        "Salt and Pepper Shakers",
        Money::usd(18, 49),
        "kitchen",
    ),
    product(
        "9SIQT8TOJO",
        "Bamboo Glass Jar",
        Money::usd(5, 49),
        "kitchen",
    ),
    product("6E92ZMYYFZ", "Mug", Money::usd(8, 99), "kitchen"),
];

/// The index in [`PRODUCTS`] of the product `id`.
pub fn product_index(id: &[u8]) -> Option<usize> {
    PRODUCTS.iter().position(|p| p.id.as_bytes() == id)
}

/// Carts of users who never changed theirs: (user, items).
pub const SEED_CARTS: &[(&str, &str)] = &[
    ("alice", "OLJCESPC7Z:2,66VCHSJNUP:1,9SIQT8TOJO:3"),
    ("carol", "1YMWWN1N4O:1"),
];

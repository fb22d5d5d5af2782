//! The in-memory data of the hotel workload: hotels (profiles and locations), rate plans and
//! users. It follows DeathStarBench's `hotelReservation` seed data: the six San Francisco
//! hotels of its `data/hotels.json`, further generated hotels placed as its `initializeDatabase`
//! places hotels 7 and up, `Cornell_<n>` users whose password is `<n>` ten times.

use crate::coord::Micro;
use crate::date::Date;
use fjord_app_kit::hash::fnv1a64;

/// A hotel's profile, location and room count.
#[derive(Clone, Copy, Debug)]
pub struct Hotel {
    /// The hotel id.
    pub id: u64,
    /// Its name.
    pub name: &'static str,
    /// Its phone number.
    pub phone: &'static str,
    /// Its street address.
    pub address: &'static str,
    /// Latitude.
    pub lat: Micro,
    /// Longitude.
    pub lon: Micro,
    /// Rooms it can let per night.
    pub capacity: u64,
}

const fn hotel(
    id: u64,
    name: &'static str,
    phone: &'static str,
    address: &'static str,
    lat: i64,
    lon: i64,
) -> Hotel {
    Hotel {
        id,
        name,
        phone,
        address,
        lat: Micro(lat),
        lon: Micro(lon),
        capacity: 200,
    }
}

/// Generated hotel `i` (7 and up) at DeathStarBench's `37.7835 + i·0.006`, `-122.41 + i·0.008`.
const fn generated(id: u64, name: &'static str) -> Hotel {
    let i = id as i64;
    hotel(
        id,
        name,
        "(415) 555-0100",
        "Market St, San Francisco",
        37_783_500 + i * 6_000,
        -122_410_000 + i * 8_000,
    )
}

/// Every hotel, by id.
pub const HOTELS: &[Hotel] = &[
    hotel(
        1,
        "Clift Hotel",
        "(415) 775-4700",
        "495 Geary St, San Francisco",
        37_786_700,
        -122_411_200,
    ),
    hotel(
        2,
        "W San Francisco",
        "(415) 777-5300",
        "181 3rd St, San Francisco",
        37_785_400,
        -122_400_500,
    ),
    hotel(
        3,
        "Hotel Zetta",
        "(415) 543-8555",
        "55 5th St, San Francisco",
        37_783_400,
        -122_407_100,
    ),
    hotel(
        4,
        "Hotel Vitale",
        "(415) 278-3700",
        "8 Mission St, San Francisco",
        37_793_600,
        -122_393_000,
    ),
    hotel(
        5,
        "Phoenix Hotel",
        "(415) 776-1380",
        "601 Eddy St, San Francisco",
        37_783_100,
        -122_418_100,
    ),
    hotel(
        6,
        "St. Regis San Francisco",
        "(415) 284-4000",
        "125 3rd St, San Francisco",
        37_786_300,
        -122_401_500,
    ),
    generated(7, "Hotel #7"),
    generated(8, "Hotel #8"),
    generated(9, "Hotel #9"),
    generated(10, "Hotel #10"),
    generated(11, "Hotel #11"),
    generated(12, "Hotel #12"),
];

/// The hotel `id`.
pub fn hotel_by_id(id: u64) -> Option<&'static Hotel> {
    HOTELS.iter().find(|h| h.id == id)
}

/// A rate plan: a room type at a price for stays within `[from, to)`.
#[derive(Clone, Copy, Debug)]
pub struct RatePlan {
    /// The hotel.
    pub hotel: u64,
    /// The plan's code.
    pub code: &'static str,
    /// First night the plan applies to.
    pub from: Date,
    /// The day after the last night it applies to.
    pub to: Date,
    /// The room type's code.
    pub room: &'static str,
    /// The room type.
    pub description: &'static str,
    /// Price per night in cents, before taxes.
    pub total: u64,
    /// Price per night in cents, taxes included.
    pub inclusive: u64,
}

const fn plan(
    hotel: u64,
    code: &'static str,
    from: Date,
    to: Date,
    room: &'static str,
    total: u64,
    inclusive: u64,
) -> RatePlan {
    let description = match room.as_bytes() {
        b"KNG" => "King sized bed",
        b"QN" => "Queen sized bed",
        _ => "Double beds",
    };
    RatePlan {
        hotel,
        code,
        from,
        to,
        room,
        description,
        total,
        inclusive,
    }
}

const APRIL: (Date, Date) = (Date::ymd(2015, 4, 1), Date::ymd(2015, 5, 1));
const SUMMER: (Date, Date) = (Date::ymd(2015, 5, 1), Date::ymd(2015, 9, 1));

/// Every rate plan (DeathStarBench's `RACK` plans for April 2015, plus promotions).
pub const RATE_PLANS: &[RatePlan] = &[
    plan(1, "RACK", APRIL.0, APRIL.1, "KNG", 10_900, 12_317),
    plan(
        1,
        "PROMO",
        Date::ymd(2015, 4, 5),
        Date::ymd(2015, 4, 15),
        "QN",
        9_900,
        11_194,
    ),
    plan(2, "RACK", APRIL.0, APRIL.1, "QN", 13_900, 15_309),
    plan(3, "RACK", APRIL.0, APRIL.1, "KNG", 10_900, 12_317),
    plan(4, "RACK", APRIL.0, APRIL.1, "DBL", 15_900, 17_967),
    plan(5, "RACK", APRIL.0, APRIL.1, "KNG", 12_900, 14_577),
    plan(
        5,
        "WEEKLY",
        Date::ymd(2015, 4, 12),
        Date::ymd(2015, 4, 30),
        "KNG",
        11_500,
        12_995,
    ),
    plan(6, "SUMMER", SUMMER.0, SUMMER.1, "KNG", 19_900, 22_487),
    plan(7, "RACK", APRIL.0, APRIL.1, "QN", 12_000, 13_560),
    plan(8, "RACK", APRIL.0, APRIL.1, "KNG", 10_900, 12_317),
    plan(9, "RACK", APRIL.0, APRIL.1, "DBL", 9_500, 10_735),
    plan(10, "RACK", SUMMER.0, SUMMER.1, "QN", 12_500, 14_125),
    plan(11, "RACK", APRIL.0, APRIL.1, "KNG", 14_500, 16_385),
    plan(12, "RACK", APRIL.0, SUMMER.1, "QN", 11_000, 12_430),
];

/// A registered user and the FNV-1a hash of the password (DeathStarBench stores a SHA-256).
#[derive(Clone, Copy, Debug)]
pub struct User {
    /// The user name.
    pub name: &'static str,
    /// `fnv1a64(password)`.
    pub password_hash: u64,
}

const fn user(name: &'static str, password: &[u8]) -> User {
    User {
        name,
        password_hash: fnv1a64(password),
    }
}

/// Every user.
pub const USERS: &[User] = &[
    user("Cornell_0", b"0000000000"),
    user("Cornell_1", b"1111111111"),
    user("Cornell_2", b"2222222222"),
    user("Cornell_3", b"3333333333"),
    user("Cornell_4", b"4444444444"),
    user("Cornell_5", b"5555555555"),
    user("Cornell_6", b"6666666666"),
    user("Cornell_7", b"7777777777"),
    user("Cornell_8", b"8888888888"),
    user("Cornell_9", b"9999999999"),
];

/// A price in cents, printed `109.00`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cents(pub u64);

impl core::fmt::Display for Cents {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

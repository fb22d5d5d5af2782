//! The in-memory data of the social workload: the registered users and the seed follow graph
//! (DeathStarBench loads a social graph, `socfb-Reed98`, before a run; this is a small one).

/// Most users (the bound of every follower and followee list).
pub const MAX_USERS: usize = 16;

/// Registered users: (id, name).
pub const USERS: &[(u64, &str)] = &[
    (1, "alice"),
    (2, "bob"),
    (3, "carol"),
    (4, "dave"),
    (5, "erin"),
    (6, "frank"),
    (7, "grace"),
    (8, "heidi"),
    (9, "ivan"),
    (10, "judy"),
    (11, "mallory"),
    (12, "oscar"),
];

/// The seed follow graph: (follower, followee).
pub const FOLLOWS: &[(u64, u64)] = &[
    (2, 1),
    (3, 1),
    (5, 1),
    (1, 2),
    (3, 2),
    (1, 3),
    (4, 3),
    (6, 4),
    (7, 5),
    (8, 6),
    (9, 7),
    (10, 8),
    (11, 9),
    (12, 10),
    (1, 12),
];

/// The id of the user `name`.
pub fn user_id(name: &[u8]) -> Option<u64> {
    USERS
        .iter()
        .find(|(_, n)| n.as_bytes() == name)
        .map(|&(id, _)| id)
}

/// Whether `id` is a registered user.
pub fn is_user(id: u64) -> bool {
    USERS.iter().any(|&(u, _)| u == id)
}

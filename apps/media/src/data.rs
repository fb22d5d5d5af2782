//! The in-memory data of the media workload: movies with their cast, cast members, plots and
//! seed reviews (DeathStarBench loads TMDB movie and cast records before a run; this is a
//! small hand-written set).

/// A movie.
#[derive(Clone, Copy, Debug)]
pub struct Movie {
    /// The movie id.
    pub id: u64,
    /// Its title.
    pub title: &'static str,
    /// Release year.
    pub year: u64,
    /// Its plot's id.
    pub plot: u64,
    /// Average rating times ten (0..=100).
    pub rating_x10: u64,
    /// Ratings counted in the average.
    pub votes: u64,
    /// Cast: (cast member id, character).
    pub cast: &'static [(u64, &'static str)],
}

/// A cast member.
#[derive(Clone, Copy, Debug)]
pub struct CastMember {
    /// The cast member id.
    pub id: u64,
    /// Name.
    pub name: &'static str,
    /// `male` or `female`.
    pub gender: &'static str,
    /// A short introduction.
    pub intro: &'static str,
}

/// A plot summary: (plot id, text).
pub type Plot = (u64, &'static str);

/// A review.
#[derive(Clone, Copy, Debug)]
pub struct Review {
    /// The review id.
    pub id: u64,
    /// The movie reviewed.
    pub movie: u64,
    /// The reviewer's user name.
    pub user: &'static str,
    /// Rating, 0..=10.
    pub rating: u64,
    /// The review's text.
    pub text: &'static str,
}

/// Every movie.
pub const MOVIES: &[Movie] = &[
    Movie {
        id: 1,
        title: "The Matrix",
        year: 1999,
        plot: 1,
        rating_x10: 87,
        votes: 1_900,
        cast: &[
            (1, "Neo"),
            (2, "Morpheus"),
            (3, "Trinity"),
            (4, "Agent Smith"),
            (5, "Cypher"),
        ],
    },
    Movie {
        id: 2,
        title: "Inception",
        year: 2010,
        plot: 2,
        rating_x10: 88,
        votes: 2_400,
        cast: &[
            (6, "Cobb"),
            (7, "Arthur"),
            (8, "Ariadne"),
            (9, "Eames"),
            (10, "Saito"),
        ],
    },
    Movie {
        id: 3,
        title: "Spirited Away",
        year: 2001,
        plot: 3,
        rating_x10: 86,
        votes: 800,
        cast: &[
            (11, "Chihiro"),
            (12, "Haku"),
            (13, "Yubaba"),
            (14, "Akio"),
            (15, "Yugo"),
        ],
    },
    Movie {
        id: 4,
        title: "Arrival",
        year: 2016,
        plot: 4,
        rating_x10: 79,
        votes: 700,
        cast: &[
            (16, "Louise Banks"),
            (17, "Ian Donnelly"),
            (18, "Colonel Weber"),
            (19, "Agent Halpern"),
            (20, "General Shang"),
        ],
    },
];

const fn cast(
    id: u64,
    name: &'static str,
    gender: &'static str,
    intro: &'static str,
) -> CastMember {
    CastMember {
        id,
        name,
        gender,
        intro,
    }
}

/// Every cast member.
pub const CAST: &[CastMember] = &[
    cast(1, "Keanu Reeves", "male", "Canadian actor"),
    cast(2, "Laurence Fishburne", "male", "American actor"),
    cast(3, "Carrie-Anne Moss", "female", "Canadian actress"),
    cast(4, "Hugo Weaving", "male", "Australian actor"),
    cast(5, "Joe Pantoliano", "male", "American actor"),
    cast(6, "Leonardo DiCaprio", "male", "American actor"),
    cast(7, "Joseph Gordon-Levitt", "male", "American actor"),
    cast(8, "Elliot Page", "male", "Canadian actor"),
    cast(9, "Tom Hardy", "male", "English actor"),
    cast(10, "Ken Watanabe", "male", "Japanese actor"),
    cast(11, "Rumi Hiiragi", "female", "Japanese actress"),
    cast(12, "Miyu Irino", "male", "Japanese actor"),
    cast(13, "Mari Natsuki", "female", "Japanese actress"),
    cast(14, "Takashi Naito", "male", "Japanese actor"),
    cast(15, "Yasuko Sawaguchi", "female", "Japanese actress"),
    cast(16, "Amy Adams", "female", "American actress"),
    cast(17, "Jeremy Renner", "male", "American actor"),
    cast(18, "Forest Whitaker", "male", "American actor"),
    cast(19, "Michael Stuhlbarg", "male", "American actor"),
    cast(20, "Tzi Ma", "male", "American actor"),
];

/// Every plot.
pub const PLOTS: &[Plot] = &[
    (
        1,
        "A hacker learns that his world is a simulation run by machines and joins the rebels who fight them.",
    ),
    (
        2,
        "A thief who steals secrets from dreams is offered one last job: planting an idea in an heir's mind.",
    ),
    (
        3,
        "A girl trapped in the spirit world works in a witch's bathhouse to free her parents.",
    ),
    (
        4,
        "A linguist is asked to talk with visitors from space, and their language changes how she sees time.",
    ),
];

const fn review(
    id: u64,
    movie: u64,
    user: &'static str,
    rating: u64,
    text: &'static str,
) -> Review {
    Review {
        id,
        movie,
        user,
        rating,
        text,
    }
}

/// The seed reviews, oldest first.
pub const REVIEWS: &[Review] = &[
    review(
        1,
        1,
        "user_1",
        9,
        "Still the best action film of its decade.",
    ),
    review(2, 1, "user_2", 8, "The lobby scene alone is worth it."),
    review(3, 1, "user_3", 10, "Red pill, every time."),
    review(4, 1, "user_4", 7, "Great ideas, some wooden dialogue."),
    review(5, 1, "user_5", 9, "Bullet time changed how films are shot."),
    review(6, 2, "user_1", 9, "A heist film in layers of dreams."),
    review(7, 2, "user_6", 8, "The spinning top still bothers me."),
    review(8, 2, "user_7", 9, "The score is enormous."),
    review(9, 2, "user_8", 6, "Too much exposition for me."),
    review(10, 3, "user_2", 10, "Beautiful and strange."),
    review(11, 3, "user_9", 9, "No-Face deserves its own film."),
    review(12, 3, "user_3", 9, "Every frame could hang on a wall."),
    review(13, 4, "user_4", 8, "Quiet science fiction about grief."),
    review(
        14,
        4,
        "user_5",
        9,
        "The language ideas are real linguistics.",
    ),
    review(15, 4, "user_6", 7, "Slow but it pays off."),
    review(16, 4, "user_7", 8, "Amy Adams carries it."),
];

/// The movie `id`.
pub fn movie(id: u64) -> Option<&'static Movie> {
    MOVIES.iter().find(|m| m.id == id)
}

/// The cast member `id`.
pub fn cast_member(id: u64) -> Option<&'static CastMember> {
    CAST.iter().find(|c| c.id == id)
}

/// The plot `id`'s text.
pub fn plot(id: u64) -> Option<&'static str> {
    PLOTS.iter().find(|p| p.0 == id).map(|p| p.1)
}

/// The seed review `id`.
pub fn seed_review(id: u64) -> Option<&'static Review> {
    REVIEWS.iter().find(|r| r.id == id)
}

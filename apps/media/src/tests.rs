//! The media operations end to end, in process.

use fjord_app_kit::test_env::TestEnv;
use fjord_faas::workloads::find;
use fjord_libos::function::FnError;
use std::string::String;

fn env() -> TestEnv {
    TestEnv::new(&crate::routes::<TestEnv>())
}

fn text(r: Result<std::vec::Vec<u8>, FnError>) -> String {
    String::from_utf8(r.unwrap()).unwrap()
}

#[test]
fn read_page_fans_out() {
    let mut env = env();
    let op = find("media", "read_page").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    assert!(
        out.contains(std::str::from_utf8(op.expect).unwrap()),
        "{out}"
    );
    let lines: std::vec::Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "movie=1&title=The Matrix&year=1999&rating=8.7&votes=1900"
    );
    assert!(lines[1].starts_with("plot=A hacker"));
    assert_eq!(
        lines[2],
        "cast=Keanu Reeves&character=Neo&gender=male&intro=Canadian actor"
    );
    assert_eq!(lines.len(), 2 + 5 + 4);
    assert!(lines[7].starts_with("review=5&movie=1&user=user_5&rating=9&text=Bullet+time"));
    // frontend, page, movie-info, 5 × cast-info, plot, movie-review, 4 × review-storage.
    assert_eq!(env.total_calls(), 1 + 13);
    assert_eq!(env.calls("media-cast-info"), 5);
    assert_eq!(env.calls("media-review-storage"), 4);
    assert!(out.len() < 1024 + op.request.len());
}

#[test]
fn upload_unique_id_is_repeatable_and_bounded() {
    let mut env = env();
    let op = find("media", "upload_unique_id").unwrap();
    assert_eq!(
        text(env.invoke(op.entry, op.request)),
        "review_id=281474976710657&req=1&parts=1"
    );
    for _ in 0..1000 {
        let out = text(env.invoke(op.entry, op.request));
        assert!(
            out.contains(std::str::from_utf8(op.expect).unwrap()),
            "{out}"
        );
    }
    // The counter and the one part.
    assert_eq!(env.store.len(), 2);
}

#[test]
fn composed_reviews_show_on_the_page() {
    let mut env = env();
    let req = b"op=compose_review&req=7&user=user_9&movie=1&rating=10&text=Whoa%21";
    for i in 1..=20u64 {
        let out = text(env.invoke("media-frontend", req));
        assert_eq!(out, std::format!("req=7&review={}", (1u64 << 48) + i));
    }
    let page = text(env.invoke("media-frontend", b"op=read_page&movie=1&start=0&stop=2"));
    let first = std::format!(
        "review={}&movie=1&user=user_9&rating=10&text=Whoa%21\n",
        (1u64 << 48) + 20
    );
    assert!(page.contains(&first), "{page}");
    // The list is capped, the parts cleared.
    let list = env.store.get(&b"media/movie-reviews/1"[..]).unwrap();
    assert_eq!(
        list.iter().filter(|&&b| b == b',').count(),
        crate::reviews::PER_MOVIE - 1
    );
    assert_eq!(env.store.get(&b"media/compose/7/user"[..]).unwrap(), b"");
    // Paging past the list returns no reviews.
    let page = text(env.invoke("media-frontend", b"op=read_page&movie=2&start=10&stop=12"));
    assert_eq!(page.lines().count(), 2 + 5);
}

#[test]
fn malformed_requests_are_bad_requests() {
    let mut env = env();
    for req in [
        &b"op=read_page&movie=9&start=0&stop=4"[..],
        b"op=read_page&movie=1&start=4&stop=4",
        b"op=read_page&movie=1&start=0&stop=20",
        b"op=upload_unique_id",
        b"op=compose_review&req=1&user=u&movie=1&rating=11&text=x",
        b"op=nothing",
    ] {
        assert_eq!(
            env.invoke("media-frontend", req),
            Err(FnError::BadRequest),
            "{req:?}"
        );
    }
    assert_eq!(
        env.invoke("media-review-storage", b"op=store&review=3&movie=1"),
        Err(FnError::BadRequest)
    );
}

#[test]
fn state_stays_within_the_kv_quota() {
    let ops: std::vec::Vec<(&str, &[u8])> = fjord_faas::workloads::OPERATIONS
        .iter()
        .filter(|o| o.workload == "media")
        .map(|o| (o.entry, o.request))
        .collect();
    let most = env().most_state(&ops, 3000);
    assert!(
        most <= fjord_app_kit::test_env::WORKLOAD_KV_QUOTA / 4,
        "{most} bytes"
    );
}

//! The social operations end to end, in process.

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
fn compose_post_publishes_to_timelines() {
    let mut env = env();
    let op = find("social", "compose_post").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    // alice (1) is followed by bob, carol and erin, and mentions bob and carol.
    assert_eq!(out, "post=281474976710657&user=1&mentions=2&urls=1&home=3");
    assert_eq!(env.total_calls(), 9);
    let post = text(env.invoke("social-storage", b"op=read&post=281474976710657"));
    assert!(
        post.contains(
            "&creator=1&name=alice&text=Hello+@bob+and+@carol%2C+see+http://short-url.com/"
        ),
        "{post}"
    );
    assert!(
        post.contains("&mentions=2,3&urls=http://short-url.com/"),
        "{post}"
    );
    let home = text(env.invoke("social-timeline", b"op=read&user=2&kind=home"));
    assert_eq!(home, "user=2&posts=281474976710657");
    let own = text(env.invoke("social-timeline", b"op=read&user=1&kind=user"));
    assert_eq!(own, "user=1&posts=281474976710657");
}

#[test]
fn compose_post_is_repeatable_and_bounded() {
    let mut env = env();
    let op = find("social", "compose_post").unwrap();
    let mut sizes = std::vec::Vec::new();
    for _ in 0..2000 {
        let out = text(env.invoke(op.entry, op.request));
        assert!(
            out.contains(std::str::from_utf8(op.expect).unwrap()),
            "{out}"
        );
        sizes.push(env.store_bytes());
    }
    assert_eq!(sizes[1999], sizes[1000]);
    let home = text(env.invoke("social-timeline", b"op=read&user=2&kind=home"));
    assert_eq!(home.matches(',').count(), crate::timeline::TIMELINE - 1);
}

#[test]
fn follow_adds_an_edge_once() {
    let mut env = env();
    let op = find("social", "follow").unwrap();
    for _ in 0..100 {
        let out = text(env.invoke(op.entry, op.request));
        assert_eq!(out, "follow=ok&user=1&followee=4&followers=2&followees=4");
    }
    assert_eq!(env.store.len(), 2);
    // alice now sees dave's posts (dave is followed by frank in the seed graph).
    let out = text(env.invoke("social-frontend", b"op=compose_post&user=dave&text=hi"));
    assert!(out.ends_with("&mentions=0&urls=0&home=2"), "{out}");
    let home = text(env.invoke("social-timeline", b"op=read&user=1&kind=home"));
    assert_eq!(home, "user=1&posts=281474976710657");
}

#[test]
fn unknown_users_and_bad_text_are_bad_requests() {
    let mut env = env();
    for req in [
        &b"op=follow&user=alice&followee=nobody"[..],
        b"op=follow&user=alice&followee=alice",
        b"op=compose_post&user=nobody&text=hi",
        b"op=compose_post&user=alice&text=%zz",
        b"op=compose_post&user=alice",
        b"op=read&user=alice",
    ] {
        assert_eq!(
            env.invoke("social-frontend", req),
            Err(FnError::BadRequest),
            "{req:?}"
        );
    }
    let long = std::format!("op=compose_post&user=alice&text={}", "x".repeat(600));
    assert_eq!(
        env.invoke("social-frontend", long.as_bytes()),
        Err(FnError::BadRequest)
    );
}

#[test]
fn mentions_of_unknown_users_are_ignored() {
    let mut env = env();
    let out = text(env.invoke("social-text", b"text=hi+%40zed+%40dave"));
    assert_eq!(out, "text=hi+@zed+@dave\nmention=dave&user=4\n");
}

#[test]
fn the_longest_posts_fit_every_hop() {
    let mut env = env();
    // 512 bytes that all need escaping, with eight short URLs that grow when shortened.
    let mut post = String::new();
    for i in 0..8 {
        post.push_str(&std::format!("http://{i} "));
    }
    post.push_str(&"é".repeat((512 - post.len()) / 2));
    let encoded = fjord_app_kit::form::Encoded(post.as_bytes());
    let req = std::format!("op=compose_post&user=alice&text={encoded}");
    let out = text(env.invoke("social-frontend", req.as_bytes()));
    assert!(out.contains("&urls=8&"), "{out}");
}

#[test]
fn state_stays_within_the_kv_quota() {
    let ops: std::vec::Vec<(&str, &[u8])> = fjord_faas::workloads::OPERATIONS
        .iter()
        .filter(|o| o.workload == "social")
        .map(|o| (o.entry, o.request))
        .collect();
    let most = env().most_state(&ops, 3000);
    assert!(
        most <= fjord_app_kit::test_env::WORKLOAD_KV_QUOTA / 4,
        "{most} bytes"
    );
}

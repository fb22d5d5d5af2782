//! The hotel operations end to end, in process.

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
fn search_nearby_lists_available_hotels_cheapest_first() {
    let mut env = env();
    let op = find("hotel", "search_nearby").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    assert!(
        out.contains(std::str::from_utf8(op.expect).unwrap()),
        "{out}"
    );
    let lines: std::vec::Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "hotels=4");
    assert!(lines[1].starts_with("hotel=1&name=Clift Hotel&"), "{out}");
    assert!(lines[1].ends_with("&rate=99.00"), "{out}");
    assert!(lines[4].starts_with("hotel=2&"), "{out}");
    assert_eq!(env.total_calls(), 6);
}

#[test]
fn full_hotels_drop_out_of_the_search() {
    let mut env = env();
    let book = b"op=make_reservation&user=Cornell_2&password=2222222222&hotel=1\
&in=2015-04-09&out=2015-04-10&rooms=10";
    for _ in 0..20 {
        assert!(text(env.invoke("hotel-frontend", book)).starts_with("reservation=ok"));
    }
    assert!(text(env.invoke("hotel-frontend", book)).starts_with("reservation=unavailable"));
    let op = find("hotel", "search_nearby").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    assert!(
        out.starts_with("hotels=3\n") && !out.contains("Clift"),
        "{out}"
    );
}

#[test]
fn make_reservation_is_repeatable_and_bounded() {
    let mut env = env();
    let op = find("hotel", "make_reservation").unwrap();
    let mut ok = 0;
    for i in 0..1000 {
        let out = text(env.invoke(op.entry, op.request));
        assert!(
            out.contains(std::str::from_utf8(op.expect).unwrap()),
            "{out}"
        );
        ok += usize::from(out.starts_with("reservation=ok"));
        if i == 0 {
            assert_eq!(
                out,
                "reservation=ok&hotel=12&in=2015-04-20&out=2015-04-21&rooms=1"
            );
        }
    }
    assert_eq!(ok, 200);
    assert_eq!(env.store.len(), 2);
}

#[test]
fn wrong_passwords_are_denied() {
    let mut env = env();
    let out = text(env.invoke(
        "hotel-frontend",
        b"op=make_reservation&user=Cornell_1&password=x&hotel=1&in=2015-04-09&out=2015-04-10&rooms=1",
    ));
    assert_eq!(out, "reservation=denied&user=Cornell_1");
    assert!(env.store.is_empty());
}

#[test]
fn malformed_requests_are_bad_requests() {
    let mut env = env();
    for req in [
        &b"op=search_nearby&lat=95&lon=0&in=2015-04-09&out=2015-04-10"[..],
        b"op=search_nearby&lat=37&lon=-122&in=2015-04-10&out=2015-04-09",
        b"op=search_nearby&lat=37&lon=-122&in=2015-04-01&out=2015-05-01",
        b"op=make_reservation&user=Cornell_1&password=1111111111&hotel=99&in=2015-04-09&out=2015-04-10&rooms=1",
        b"op=make_reservation&user=Cornell_1&password=1111111111&hotel=1&in=2015-04-09&out=2015-04-10&rooms=0",
        b"op=nothing",
        b"",
    ] {
        assert_eq!(env.invoke("hotel-frontend", req), Err(FnError::BadRequest), "{req:?}");
    }
    assert_eq!(env.invoke("hotel-geo", b"lat=1"), Err(FnError::BadRequest));
    assert_eq!(
        env.invoke("hotel-rate", b"hotels=1,x&in=2015-04-09&out=2015-04-10"),
        Err(FnError::BadRequest)
    );
    assert_eq!(
        env.invoke("hotel-profile", b"hotels=77"),
        Err(FnError::BadRequest)
    );
}

#[test]
fn searching_nowhere_finds_nothing() {
    let mut env = env();
    let out = text(env.invoke(
        "hotel-frontend",
        b"op=search_nearby&lat=0&lon=0&in=2015-04-09&out=2015-04-10",
    ));
    assert_eq!(out, "hotels=0\n");
}

#[test]
fn state_stays_within_the_kv_quota() {
    let ops: std::vec::Vec<(&str, &[u8])> = fjord_faas::workloads::OPERATIONS
        .iter()
        .filter(|o| o.workload == "hotel")
        .map(|o| (o.entry, o.request))
        .collect();
    let most = env().most_state(&ops, 3000);
    assert!(
        most <= fjord_app_kit::test_env::WORKLOAD_KV_QUOTA / 4,
        "{most} bytes"
    );
}

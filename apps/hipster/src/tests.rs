//! The hipster operations end to end, in process.

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
fn get_cart_prices_the_seed_cart() {
    let mut env = env();
    let op = find("hipster", "get_cart").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    assert!(
        out.contains(std::str::from_utf8(op.expect).unwrap()),
        "{out}"
    );
    // 2 × $19.99 + $18.99 + 3 × $5.49 + $8.99 shipping, in euros at 1.1305.
    assert_eq!(
        out,
        "user=alice&items=6&shipping=EUR 7.95&total=EUR 74.68\n\
         product=OLJCESPC7Z&name=Sunglasses&quantity=2&price=EUR 17.68\n\
         product=66VCHSJNUP&name=Tank Top&quantity=1&price=EUR 16.79\n\
         product=9SIQT8TOJO&name=Bamboo Glass Jar&quantity=3&price=EUR 4.85\n"
    );
    assert_eq!(env.total_calls(), 5);
    let empty = text(env.invoke(op.entry, b"op=get_cart&user=zed&currency=USD"));
    assert_eq!(empty, "user=zed&items=0&shipping=USD 0.00&total=USD 0.00\n");
}

#[test]
fn place_order_charges_ships_and_empties_the_cart() {
    let mut env = env();
    let op = find("hipster", "place_order").unwrap();
    let out = text(env.invoke(op.entry, op.request));
    let lines: std::vec::Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("order="), "{out}");
    // $19.99 + 2 × $89.99 + $8.99 in euros.
    assert!(
        lines[0].contains("&items=3&shipping=EUR 7.95&total=EUR 184.83&transaction="),
        "{out}"
    );
    assert!(lines[0].contains("&tracking="), "{out}");
    assert!(lines[1].starts_with("to=bob@example.com&subject=Your Confirmation Email - Order "));
    // frontend, cart add, checkout, cart get, 2 catalog + quote, 3 currency, payment, ship,
    // cart empty, email.
    assert_eq!(env.total_calls(), 14);
    assert_eq!(env.store.get(&b"hipster/cart/bob"[..]).unwrap(), b"");
}

#[test]
fn place_order_is_repeatable_and_bounded() {
    let mut env = env();
    let op = find("hipster", "place_order").unwrap();
    for _ in 0..1000 {
        let out = text(env.invoke(op.entry, op.request));
        assert!(
            out.contains(std::str::from_utf8(op.expect).unwrap()),
            "{out}"
        );
        assert!(out.contains("&transaction="), "{out}");
    }
    assert_eq!(env.store.len(), 2);
    // Without items to add, bob's cart is empty: an answer, not an error.
    let req = String::from_utf8(op.request.to_vec())
        .unwrap()
        .replace("add=", "x=");
    assert_eq!(
        text(env.invoke(op.entry, req.as_bytes())),
        "order=none&items=0&reason=empty-cart"
    );
}

#[test]
fn bad_cards_and_inputs_are_bad_requests() {
    let mut env = env();
    let op = find("hipster", "place_order").unwrap();
    let good = String::from_utf8(op.request.to_vec()).unwrap();
    for (from, to) in [
        ("card=4432801561520454", "card=4432801561520455"),
        ("exp_year=2030", "exp_year=2024"),
        ("currency=EUR", "currency=XXX"),
        ("email=bob@example.com", "email=bob"),
        ("L9ECAV7KIM:2", "NOPE:2"),
        ("&zip=94043", ""),
    ] {
        let req = good.replace(from, to);
        assert_eq!(
            env.invoke(op.entry, req.as_bytes()),
            Err(FnError::BadRequest),
            "{req}"
        );
    }
    let email = text(env.invoke(
        "hipster-email",
        b"op=confirm&email=a@b.io&order=o1&tracking=AB-1&total=EUR:1.5&items=1&street=Main+St+1&city=Z%C3%BCrich&zip=8000&country=CH",
    ));
    assert!(
        email.ends_with("Shipping to: Main St 1, Zürich 8000, CH.\n"),
        "{email}"
    );
    assert!(
        text(env.invoke("hipster-currency", b"op=currencies")).starts_with("currencies=EUR,USD,")
    );
}

#[test]
fn state_stays_within_the_kv_quota() {
    let ops: std::vec::Vec<(&str, &[u8])> = fjord_faas::workloads::OPERATIONS
        .iter()
        .filter(|o| o.workload == "hipster")
        .map(|o| (o.entry, o.request))
        .collect();
    let most = env().most_state(&ops, 3000);
    assert!(
        most <= fjord_app_kit::test_env::WORKLOAD_KV_QUOTA / 4,
        "{most} bytes"
    );
}

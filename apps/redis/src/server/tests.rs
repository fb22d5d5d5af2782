//! The server state machine: pipelining, partial reads, protocol errors, connection limits,
//! back-pressure and saving, with an in-memory [`MemHost`].

use super::*;
use crate::persist::tests::MemHost;
use crate::rdb;
use alloc::string::String;
use alloc::vec;

const T0: i64 = 1_700_000_000_000;

fn now() -> Now {
    Now {
        unix_ms: T0,
        mono_us: 5_000_000,
    }
}

fn server() -> Server {
    Server::new(Config::new(6379, 1, 1), now())
}

/// Takes what `id` has to send.
fn drain(s: &mut Server, id: ClientId) -> Vec<u8> {
    let out = s.output(id).to_vec();
    s.consume_output(id, out.len());
    out
}

fn send(s: &mut Server, host: &mut MemHost, id: ClientId, data: &[u8]) -> String {
    s.receive(id, data, now(), host);
    String::from_utf8_lossy(&drain(s, id)).into_owned()
}

fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = alloc::format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(alloc::format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn pipelined_requests_get_replies_in_order() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    let mut batch = request(&[b"SET", b"k", b"v"]);
    batch.extend_from_slice(b"PING\r\n");
    batch.extend_from_slice(&request(&[b"GET", b"k"]));
    batch.extend_from_slice(&request(&[b"INCR", b"k"]));
    batch.extend_from_slice(b"ECHO \"two words\"\n");
    assert_eq!(
        send(&mut s, &mut host, id, &batch),
        "+OK\r\n+PONG\r\n$1\r\nv\r\n-ERR value is not an integer or out of range\r\n$9\r\ntwo words\r\n"
    );
    assert_eq!(s.state().stats.commands_processed, 5);
    assert_eq!(s.state().stats.error_replies, 1);
    assert_eq!(s.state().stats.net_input_bytes, batch.len() as u64);
}

#[test]
fn a_client_gone_mid_command_leaves_the_others_alone() {
    let mut s = server();
    let mut host = MemHost::default();
    let a = s.connect().unwrap();
    let b = s.connect().unwrap();
    let req = request(&[b"SET", b"shared", b"from-a"]);
    assert_eq!(send(&mut s, &mut host, a, &req[..req.len() - 3]), "");
    assert_eq!(
        send(
            &mut s,
            &mut host,
            b,
            &request(&[b"SET", b"shared", b"from-b"])
        ),
        "+OK\r\n"
    );
    s.disconnect(a);
    assert_eq!(
        send(&mut s, &mut host, b, b"GET shared\r\n"),
        "$6\r\nfrom-b\r\n"
    );
    assert_eq!(s.clients().collect::<Vec<_>>(), vec![b]);
    // Its id is gone for good.
    s.receive(a, b"PING\r\n", now(), &mut host);
    assert_eq!(s.output(a), b"");
    assert!(s.should_close(a));
}

#[test]
fn protocol_errors_reply_and_close() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    let got = send(
        &mut s,
        &mut host,
        id,
        b"PING\r\n*1\r\n$99999999\r\nPING\r\n",
    );
    assert_eq!(got, "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n");
    assert!(s.should_close(id));
    assert!(!s.wants_input(id));
    // Nothing after the error runs.
    assert_eq!(send(&mut s, &mut host, id, b"PING\r\n"), "");

    let id = s.connect().unwrap();
    s.receive(id, b"*1\r\nPING\r\n", now(), &mut host);
    assert!(!s.should_close(id), "the reply is not sent yet");
    assert_eq!(
        drain(&mut s, id),
        b"-ERR Protocol error: expected '$', got 'P'\r\n"
    );
    assert!(s.should_close(id));
}

#[test]
fn oversized_bulk_arguments() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    let big = vec![b'x'; crate::resp::MAX_BULK];
    let req = request(&[b"SET", b"big", &big]);
    // Fed in 64 KiB reads, as a socket would give it.
    for chunk in req.chunks(64 * 1024) {
        s.receive(id, chunk, now(), &mut host);
    }
    assert_eq!(drain(&mut s, id), b"+OK\r\n");
    assert_eq!(
        s.db().peek(b"big").map(|e| e.value().len()),
        Some(crate::resp::MAX_BULK)
    );
    let too_big = alloc::format!(
        "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n",
        crate::resp::MAX_BULK + 1
    );
    assert_eq!(
        send(&mut s, &mut host, id, too_big.as_bytes()),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert!(s.should_close(id));
}

#[test]
fn quit_closes_after_its_reply() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    s.receive(id, b"QUIT\r\nPING\r\n", now(), &mut host);
    assert!(!s.should_close(id));
    assert_eq!(drain(&mut s, id), b"+OK\r\n");
    assert!(s.should_close(id));
}

#[test]
fn the_client_limit() {
    let mut s = server();
    for _ in 0..64 {
        s.connect().unwrap();
    }
    assert_eq!(s.connect(), Err(TooManyClients));
    assert_eq!(s.state().stats.rejected_connections, 1);
    assert_eq!(s.state().connected_clients, 64);
    assert_eq!(MAX_CLIENTS_REPLY, b"-ERR max number of clients reached\r\n");
    let first = s.clients().next().unwrap();
    s.disconnect(first);
    assert!(s.connect().is_ok());
}

#[test]
fn a_client_that_does_not_read_is_held_back() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    let value = vec![b'v'; 100_000];
    s.receive(id, &request(&[b"SET", b"k", &value]), now(), &mut host);
    drain(&mut s, id);
    let mut gets = Vec::new();
    for _ in 0..30 {
        gets.extend_from_slice(&request(&[b"GET", b"k"]));
    }
    s.receive(id, &gets, now(), &mut host);
    // About 1 MiB of replies, then the rest waits.
    let pending = s.output(id).len();
    assert!(
        (OUTPUT_SOFT_LIMIT..OUTPUT_SOFT_LIMIT + 110_000).contains(&pending),
        "{pending}"
    );
    assert!(!s.wants_input(id));
    assert!(s.has_waiting_input(id));
    let mut replies = drain(&mut s, id).len();
    assert!(s.wants_input(id));
    while s.has_waiting_input(id) {
        s.receive(id, &[], now(), &mut host);
        replies += drain(&mut s, id).len();
    }
    assert_eq!(replies, 30 * (100_000 + "$100000\r\n\r\n".len()));
}

#[test]
fn partial_writes_are_tracked() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    s.receive(id, b"ECHO hello\r\n", now(), &mut host);
    assert_eq!(s.output(id), b"$5\r\nhello\r\n");
    s.consume_output(id, 4);
    assert_eq!(s.output(id), b"hello\r\n");
    s.consume_output(id, 100);
    assert_eq!(s.output(id), b"");
    assert_eq!(s.state().stats.net_output_bytes, 11);
}

#[test]
fn save_and_bgsave_through_the_host() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    send(&mut s, &mut host, id, &request(&[b"SET", b"k", b"v"]));
    assert_eq!(send(&mut s, &mut host, id, b"SAVE\r\n"), "+OK\r\n");
    assert_eq!(s.state().persistence.dirty, 0);
    let file = host.file.take().unwrap();
    let mut keys = Vec::new();
    rdb::load_bytes(&file, 0, |k, v, t| keys.push((k, v, t))).unwrap();
    assert_eq!(keys, vec![(b"k".to_vec(), b"v".to_vec(), None)]);

    send(&mut s, &mut host, id, b"SET a 1\r\n");
    assert_eq!(
        send(&mut s, &mut host, id, b"BGSAVE\r\n"),
        "+Background saving started\r\n"
    );
    assert_eq!(
        send(&mut s, &mut host, id, b"BGSAVE\r\n"),
        "-ERR Background save already in progress\r\n"
    );
    let info = send(&mut s, &mut host, id, b"INFO persistence\r\n");
    assert!(info.contains("rdb_bgsave_in_progress:1\r\n"), "{info}");
    assert!(info.contains("latest_fork_usec:250\r\n"), "{info}");
    host.child_status = Some(ChildStatus::Exited(0));
    s.tick(now(), &mut host);
    let info = send(&mut s, &mut host, id, b"INFO persistence\r\n");
    assert!(info.contains("rdb_bgsave_in_progress:0\r\n"), "{info}");
    assert!(info.contains("rdb_last_bgsave_status:ok\r\n"), "{info}");
    assert!(info.contains("rdb_changes_since_last_save:0\r\n"), "{info}");

    // A failed fork and a failed save answer with Redis's bare `-ERR`.
    host.fail_fork = true;
    assert_eq!(send(&mut s, &mut host, id, b"BGSAVE\r\n"), "-ERR\r\n");
    host.fail_save = true;
    assert_eq!(send(&mut s, &mut host, id, b"SAVE\r\n"), "-ERR\r\n");
    let info = send(&mut s, &mut host, id, b"INFO persistence\r\n");
    assert!(info.contains("rdb_last_bgsave_status:err\r\n"), "{info}");
}

#[test]
fn flushall_kills_the_child_and_saves() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    send(&mut s, &mut host, id, b"SET a 1\r\n");
    send(&mut s, &mut host, id, b"BGSAVE\r\n");
    assert_eq!(send(&mut s, &mut host, id, b"FLUSHALL\r\n"), "+OK\r\n");
    assert_eq!(host.kills, [(100, crate::persist::SIGUSR1)]);
    assert_eq!(s.state().persistence.dirty, 0);
    let mut n = 0;
    rdb::load_bytes(host.file.as_ref().unwrap(), 0, |_, _, _| n += 1).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn shutdown_saves_then_asks_to_exit() {
    let mut s = server();
    let mut host = MemHost::default();
    let id = s.connect().unwrap();
    host.fail_save = true;
    assert_eq!(
        send(&mut s, &mut host, id, b"SHUTDOWN\r\n"),
        "-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    );
    assert!(!s.shutdown_requested());
    assert_eq!(
        send(&mut s, &mut host, id, b"SHUTDOWN NOSAVE\r\nPING\r\n"),
        ""
    );
    assert!(s.shutdown_requested());
    assert!(s.should_close(id));
}

#[test]
fn ticks_expire_keys_and_track_memory() {
    let mut s = server();
    let mut host = MemHost::default();
    s.state_mut().config.save_points.clear();
    let id = s.connect().unwrap();
    for i in 0..50 {
        send(
            &mut s,
            &mut host,
            id,
            alloc::format!("SET k{i} v PX 10\r\n").as_bytes(),
        );
    }
    let later = Now {
        unix_ms: T0 + 11,
        mono_us: 6_000_000,
    };
    s.tick(later, &mut host);
    assert_eq!(s.db().len(), 0);
    assert_eq!(s.db().expired_keys(), 50);
    assert!(s.state().peak_memory > 0);
}

proptest::proptest! {
    #[test]
    fn any_split_of_the_input_gives_the_same_output(
        cuts in proptest::collection::vec(0usize..400, 0..8),
    ) {
        let mut stream = Vec::new();
        stream.extend_from_slice(&request(&[b"SET", b"key", b"some value"]));
        stream.extend_from_slice(b"PING\r\n");
        stream.extend_from_slice(&request(&[b"APPEND", b"key", b"\r\n*$"]));
        stream.extend_from_slice(b"get key\n");
        stream.extend_from_slice(&request(&[b"MGET", b"key", b"nope"]));
        stream.extend_from_slice(b"\r\n");
        stream.extend_from_slice(&request(&[b"nosuch", b"arg"]));
        stream.extend_from_slice(&request(&[b"INCR", b"n"]));

        let mut whole = server();
        let mut host = MemHost::default();
        let id = whole.connect().unwrap();
        let want = send(&mut whole, &mut host, id, &stream);

        let mut split = server();
        let id = split.connect().unwrap();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut got = String::new();
        let mut fed = 0;
        for cut in cuts {
            got.push_str(&send(&mut split, &mut host, id, &stream[fed..cut]));
            fed = cut;
        }
        proptest::prop_assert_eq!(got, want);
    }
}

#[test]
fn every_single_split_point() {
    let stream = [
        request(&[b"SET", b"a", b"1"]),
        b"PING\r\n".to_vec(),
        request(&[b"GET", b"a"]),
        b"*0\r\n".to_vec(),
        request(&[b"DEL", b"a"]),
    ]
    .concat();
    let mut host = MemHost::default();
    let mut reference = server();
    let rid = reference.connect().unwrap();
    let want = send(&mut reference, &mut host, rid, &stream);
    assert_eq!(want, "+OK\r\n+PONG\r\n$1\r\n1\r\n:1\r\n");
    for cut in 0..=stream.len() {
        let mut s = server();
        let id = s.connect().unwrap();
        let mut got = send(&mut s, &mut host, id, &stream[..cut]);
        got.push_str(&send(&mut s, &mut host, id, &stream[cut..]));
        assert_eq!(got, want, "split at {cut}");
    }
}

proptest::proptest! {
    #[test]
    fn hostile_input_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
        let mut s = server();
        let mut host = MemHost::default();
        let id = s.connect().unwrap();
        for chunk in data.chunks(37) {
            s.receive(id, chunk, now(), &mut host);
            drain(&mut s, id);
        }
    }

    #[test]
    fn random_commands_never_panic(
        cmds in proptest::collection::vec(
            (proptest::sample::select(vec![
                "GET", "SET", "DEL", "INCR", "DECRBY", "EXPIRE", "PEXPIREAT", "TTL", "KEYS",
                "MSET", "MGET", "APPEND", "SETEX", "CONFIG", "INFO", "COMMAND", "CLIENT",
                "SELECT", "PERSIST", "GETSET", "FLUSHDB", "EXISTS", "TYPE", "SAVE", "BGSAVE",
            ]),
            proptest::collection::vec(
                proptest::sample::select(vec![
                    "k", "v", "1", "-1", "0", "EX", "PX", "NX", "XX", "GET", "KEEPTTL", "*",
                    "9223372036854775807", "-9223372036854775808", "GT", "LT", "save", "get",
                    "set", "", "[", "\\", "docs", "info",
                ]),
                0..5,
            )),
            1..30,
        ),
    ) {
        let mut s = server();
        let mut host = MemHost::default();
        let id = s.connect().unwrap();
        for (name, args) in cmds {
            let mut all: Vec<&[u8]> = vec![name.as_bytes()];
            all.extend(args.iter().map(|a| a.as_bytes()));
            s.receive(id, &request(&all), now(), &mut host);
            let out = drain(&mut s, id);
            proptest::prop_assert!(!out.is_empty());
            proptest::prop_assert!(out.ends_with(b"\r\n"));
            s.tick(now(), &mut host);
        }
    }
}

//! Networking: the virtio-net driver, the smoltcp TCP/IP stack over it, and the HTTP gateway.
//!
//! [`run`] is the boot CPU's network poll loop in `mode=run`. Nothing is interrupt-driven: the
//! loop polls the card and the stack (a bounded batch of received frames per pass, so the
//! server can refill its listening backlog between batches), serves the sockets, and spins
//! while traffic flows; after [`IDLE_AFTER_MS`] without traffic it halts between timer ticks
//! (10 ms at 100 Hz) to leave the host CPU alone, so the first packet after a quiet spell waits
//! up to one tick.
//!
//! Addresses come from the `ip=` and `gw=` options; the defaults are QEMU user networking's:
//! the guest is 10.0.2.15/24, the gateway 10.0.2.2.

mod hal;
mod nic;
mod phy;
mod server;
mod sockets;

use crate::arch::{cpu, percpu, smp, time};
use crate::kprintln;
use crate::mm::{frames, heap};
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use fjord_faas::gateway::admission::{Admission, DEFAULT_BACKLOG, cap_for_memory};
use fjord_faas::gateway::{Gateway, Sample, SampleKind, Timeouts};
use fjord_faas::http::Limits;
use fjord_faas::metrics::{LatencyUnit, Value};
use smoltcp::iface::{Config, Interface};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address};

/// The HTTP port.
pub const HTTP_PORT: u16 = 80;
/// Quiet time after which the loop halts between timer ticks.
pub const IDLE_AFTER_MS: u64 = 50;

/// Current time for smoltcp, from the TSC.
fn now() -> Instant {
    Instant::from_micros(time::ticks_to_us(time::now()) as i64)
}

/// Counters of the card and the server's sockets, for `/metrics`.
#[derive(Clone, Copy, Default)]
struct NetCounters {
    rx: u64,
    tx: u64,
    errors: u64,
    sockets: server::SocketCounts,
    max_conns: usize,
    passes: u64,
}

/// The kernel's samples for `/metrics`.
fn kernel_samples(net: NetCounters) -> Vec<Sample> {
    use SampleKind::{Counter, Gauge};
    let this = percpu::current();
    let s = |name, kind, help, labels, value: u64| Sample {
        name,
        kind,
        help,
        labels,
        runtime_label: None,
        value: Value::from(value),
    };
    let o = crate::orchestrator::stats();
    let (j, lazy) = crate::jord::with(|j| (j.stats, j.lazy_stats()));
    let nested = |c: &core::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    use crate::runtime::{invoke, task};
    let dropped = crate::syscalls::log::dropped();
    let mut v = alloc::vec![
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "submitted")],
            o.submitted
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "dispatched")],
            o.dispatched
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "completed")],
            o.completed
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "rejected")],
            o.rejected
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "suspended")],
            o.suspended
        ),
        s(
            "fjord_dispatch_total",
            Counter,
            "Orchestrator dispatch events.",
            &[("event", "resumed_locally")],
            o.local_resumes
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "instance_restored")],
            j.instances_restored
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_created")],
            j.pds_created
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_destroyed")],
            j.pds_destroyed
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "pd_switch")],
            j.pd_switches
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "vlb_fill")],
            j.fills
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "argbuf_prefill")],
            j.prefills
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "protection_fault")],
            j.protection_faults
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "shootdown")],
            j.shootdowns
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "revocation_held_back")],
            j.revocations_deferred
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "revocation_withdrawn")],
            j.revocations_withdrawn
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "function_timeout")],
            invoke::TIMEOUTS.load(Ordering::Relaxed)
        ),
        s(
            "fjord_isolation_events_total",
            Counter,
            "Jord isolation events.",
            &[("kind", "function_panic")],
            invoke::PANICS.load(Ordering::Relaxed)
        ),
        s(
            "fjord_warm_instances",
            Gauge,
            "Idle function instances kept for reuse.",
            &[],
            crate::groundhog::warm::kept() as u64
        ),
        s(
            "fjord_uprocesses",
            Gauge,
            "Live and zombie μprocesses.",
            &[],
            crate::ufork::count() as u64
        ),
        s(
            "fjord_ufork_pages_total",
            Counter,
            "Pages of lazy forks: left pending at fork, copied for a child, shared read-only.",
            &[("event", "deferred")],
            lazy.pages_deferred
        ),
        s(
            "fjord_ufork_pages_total",
            Counter,
            "Pages of lazy forks: left pending at fork, copied for a child, shared read-only.",
            &[("event", "copied")],
            lazy.pages_copied
        ),
        s(
            "fjord_ufork_pages_total",
            Counter,
            "Pages of lazy forks: left pending at fork, copied for a child, shared read-only.",
            &[("event", "shared")],
            lazy.pages_shared
        ),
        s(
            "fjord_nested_calls_total",
            Counter,
            "Nested function calls started.",
            &[],
            nested(&task::NESTED_CALLS)
        ),
        s(
            "fjord_nested_suspensions_total",
            Counter,
            "Callers suspended waiting for a nested call.",
            &[],
            nested(&task::SUSPENSIONS)
        ),
        s(
            "fjord_nested_copied_bytes_total",
            Counter,
            "Payload bytes copied by nested calls (zero unless the copying baseline is on).",
            &[],
            nested(&task::HOP_BYTES_COPIED)
        ),
    ];
    v.extend([
        s(
            "fjord_kernel_timer_ticks_total",
            Counter,
            "Local APIC timer interrupts taken by the CPU running the network loop.",
            &[("cpu", "0")],
            this.timer_ticks.load(Ordering::Relaxed),
        ),
        s(
            "fjord_kernel_ipis_received_total",
            Counter,
            "Inter-processor interrupts received by the CPU running the network loop.",
            &[("cpu", "0")],
            this.ipis.load(Ordering::Relaxed),
        ),
        s(
            "fjord_kernel_tlb_shootdown_ipis_total",
            Counter,
            "TLB-shootdown IPIs sent.",
            &[],
            smp::SHOOTDOWN_IPIS.load(Ordering::Relaxed),
        ),
        s(
            "fjord_kernel_user_faults_total",
            Counter,
            "Faults taken in user mode.",
            &[],
            crate::arch::user::USER_FAULTS.load(Ordering::Relaxed),
        ),
        s(
            "fjord_kernel_free_frames",
            Gauge,
            "Free 4 KiB physical frames.",
            &[],
            frames::free_frames() as u64,
        ),
        s(
            "fjord_kernel_heap_used_bytes",
            Gauge,
            "Bytes allocated from the kernel heap.",
            &[],
            heap::used() as u64,
        ),
        s(
            "fjord_kernel_heap_size_bytes",
            Gauge,
            "Bytes managed by the kernel heap.",
            &[],
            heap::total() as u64,
        ),
        s(
            "fjord_net_received_packets_total",
            Counter,
            "Ethernet frames received by the virtio-net card.",
            &[],
            net.rx,
        ),
        s(
            "fjord_net_sent_packets_total",
            Counter,
            "Ethernet frames sent by the virtio-net card.",
            &[],
            net.tx,
        ),
        s(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the console's rate.",
            &[("reason", "invocation_limit")],
            dropped.0.0,
        ),
        s(
            "fjord_console_dropped_messages_total",
            Counter,
            "Function log messages dropped: over the invocation's log_limit, or over the console's rate.",
            &[("reason", "rate_limit")],
            dropped.1.0,
        ),
        s(
            "fjord_console_dropped_bytes_total",
            Counter,
            "Bytes of function log messages dropped.",
            &[("reason", "invocation_limit")],
            dropped.0.1,
        ),
        s(
            "fjord_console_dropped_bytes_total",
            Counter,
            "Bytes of function log messages dropped.",
            &[("reason", "rate_limit")],
            dropped.1.1,
        ),
        s(
            "fjord_http_connections_open",
            Gauge,
            "HTTP connections being served.",
            &[],
            net.sockets.open as u64,
        ),
        s(
            "fjord_http_connections_max",
            Gauge,
            "Most HTTP connections served at once (http_max_conns, or from the heap's size).",
            &[],
            net.max_conns as u64,
        ),
        s(
            "fjord_http_listening_sockets",
            Gauge,
            "TCP sockets listening for new HTTP connections (the backlog).",
            &[],
            net.sockets.listening as u64,
        ),
        s(
            "fjord_http_sockets",
            Gauge,
            "TCP sockets of the HTTP server: serving, listening and closing.",
            &[],
            net.sockets.sockets as u64,
        ),
        s(
            "fjord_net_loop_passes_total",
            Counter,
            "Passes of the network loop (receive a batch, transmit, serve the sockets).",
            &[],
            net.passes,
        ),
        s(
            "fjord_http_socket_visits_total",
            Counter,
            "Visits of an HTTP socket by the server's passes.",
            &[],
            net.sockets.visits,
        ),
        s(
            "fjord_net_errors_total",
            Counter,
            "Frames the virtio-net driver failed to send or receive.",
            &[],
            net.errors,
        ),
    ]);
    v.extend(kv_samples());
    v.extend(groundhog_samples());
    v
}

/// Per function whose instances are restored to a snapshot: restores, pages restored, time
/// spent restoring (seconds, from the TSC) and instances replaced instead (each family's samples
/// together).
fn groundhog_samples() -> Vec<Sample> {
    use SampleKind::Counter;
    let functions: Vec<_> = crate::runtime::loaded()
        .into_iter()
        .filter(|f| f.isolation().restores())
        .map(|f| (String::from(f.manifest.name.as_str()), f.restore_stats()))
        .collect();
    let families: [(&'static str, &'static str); 5] = [
        (
            "fjord_groundhog_restores_total",
            "Instances restored to their snapshot after a request.",
        ),
        (
            "fjord_groundhog_pages_restored_total",
            "Pages copied back from a snapshot or zeroed by restores.",
        ),
        (
            "fjord_groundhog_restore_seconds_total",
            "Seconds spent restoring instances, from the TSC (virtual time under icount).",
        ),
        (
            "fjord_groundhog_replaced_total",
            "Instances destroyed instead of restored (faulted, timed out, unfit for reuse).",
        ),
        (
            "fjord_groundhog_restores_interrupted_total",
            "Restores that stopped between two steps for a waiting request and finished later.",
        ),
    ];
    let seconds = |ticks: u64| Value::seconds_from_nanos(time::ticks_to_ns(ticks));
    let mut v = Vec::new();
    for (i, (name, help)) in families.into_iter().enumerate() {
        for (f, st) in &functions {
            let value = match i {
                0 => Value::from(st.restores),
                1 => Value::from(st.pages),
                2 => seconds(st.ticks),
                3 => Value::from(st.replaced),
                _ => Value::from(st.interrupted),
            };
            v.push(Sample {
                name,
                kind: Counter,
                help,
                labels: &[],
                runtime_label: Some(("function", f.clone())),
                value,
            });
        }
    }
    v
}

/// Per key-value namespace: entries, bytes, quota and refused puts (each family's samples
/// together).
fn kv_samples() -> Vec<Sample> {
    use SampleKind::{Counter, Gauge};
    let usage = crate::kv::usage();
    let families: [(&'static str, SampleKind, &'static str); 4] = [
        (
            "fjord_kv_namespace_entries",
            Gauge,
            "Entries held by a key-value namespace.",
        ),
        (
            "fjord_kv_namespace_bytes",
            Gauge,
            "Bytes a key-value namespace holds against its quota (keys, values, 64 per entry).",
        ),
        (
            "fjord_kv_namespace_quota_bytes",
            Gauge,
            "Bytes a key-value namespace may hold.",
        ),
        (
            "fjord_kv_namespace_refused_total",
            Counter,
            "Puts refused because the namespace was full.",
        ),
    ];
    let mut v = Vec::new();
    for (i, (name, kind, help)) in families.into_iter().enumerate() {
        for u in &usage {
            let value = Value::from(match i {
                0 => u.entries as u64,
                1 => u.bytes as u64,
                2 => u.quota as u64,
                _ => u.refused,
            });
            v.push(Sample {
                name,
                kind,
                help,
                labels: &[],
                runtime_label: Some(("namespace", u.name.clone())),
                value,
            });
        }
    }
    v
}

/// Received frames the stack processes before the server runs again: fewer than the backlog,
/// so a burst of SYNs finds listening sockets (smoltcp resets a SYN that none takes).
const INGRESS_BATCH: usize = DEFAULT_BACKLOG / 2;

/// How often the stack transmits from every socket set, marked or not: for its timers, whose
/// shortest is the retransmission timeout of at least 1 s (smoltcp's minimum). Whatever the
/// server or a received frame leaves to send goes out on the same pass.
const TRANSMIT_SWEEP_MS: u64 = 100;

/// One pass of the TCP/IP stack: at most [`INGRESS_BATCH`] received frames, each to the socket
/// set [`steer`](fjord_kernel::steer::steer) picks, then what the marked sets (every set each
/// [`TRANSMIT_SWEEP_MS`], and after a frame that is not TCP, such as an ARP reply that may
/// let any set send what waited for the neighbour) have to send; returns whether any socket may
/// have changed. `marked` is scratch space.
fn poll_stack(
    iface: &mut Interface,
    dev: &mut phy::NetDevice,
    sockets: &mut sockets::Sockets,
    next_sweep: &mut Instant,
    marked: &mut Vec<usize>,
) -> bool {
    use fjord_kernel::steer::steer;
    use smoltcp::iface::{PollIngressSingleResult, PollResult};
    let t = now();
    iface.poll_maintenance(t);
    let mut changed = false;
    let mut neighbours = false;
    for _ in 0..INGRESS_BATCH {
        let Some(frame) = dev.stage() else {
            break;
        };
        let steered = steer(frame);
        neighbours |= steered == fjord_kernel::steer::Steer::Listen;
        let (set, peer) = sockets.route(steered);
        sockets.mark_transmit(set);
        match peer {
            Some(peer) => sockets.mark_peer(set, peer),
            None => sockets.mark_serve(set),
        }
        match iface.poll_ingress_single(t, dev, sockets.set(set)) {
            PollIngressSingleResult::None => break,
            PollIngressSingleResult::PacketProcessed => {}
            PollIngressSingleResult::SocketStateChanged => changed = true,
        }
    }
    let sweep = t >= *next_sweep || neighbours;
    if sweep {
        *next_sweep = t + smoltcp::time::Duration::from_millis(TRANSMIT_SWEEP_MS);
    }
    sockets.drain_transmit(sweep, marked);
    // What a socket sends changes nothing the server waits for (the peer's answer to it
    // arrives as a frame), so sending marks no socket for a visit.
    for &set in marked.iter() {
        while iface.poll_egress(t, dev, sockets.set(set)) == PollResult::SocketStateChanged {
            changed = true;
        }
    }
    changed
}

/// Heap bytes not allocated.
fn heap_free() -> usize {
    heap::total().saturating_sub(heap::used())
}

/// The connection cap (`max_conns`, or what three eighths of the heap hold when 0: 1,301
/// connections with the largest heap) and backlog.
fn admission(max_conns: usize) -> Admission {
    let backlog = DEFAULT_BACKLOG;
    let max_open = if max_conns > 0 {
        max_conns
    } else {
        cap_for_memory(heap::total() / 8 * 3, server::CONNECTION_BYTES, backlog)
    };
    Admission { max_open, backlog }
}

/// Brings up the network and serves HTTP forever; returns (after a warning) only if there is no
/// usable network card.
pub fn run(opts: &fjord_kernel::cmdline::BootOptions<'_>) {
    let Some((nic, bus)) = nic::find() else {
        log::warn!("net: no virtio-net card found; the HTTP gateway is off");
        return;
    };
    let mut dev = phy::NetDevice::new(nic);
    let mac = EthernetAddress(dev.mac());
    log::info!("net: virtio-net ({bus}), MAC {mac}");
    let mut config = Config::new(mac.into());
    config.random_seed = cpu::rdtsc();
    let mut iface = Interface::new(config, &mut dev, now());
    let [a, b, c, d] = opts.ip.addr;
    let guest_ip = Ipv4Address::new(a, b, c, d);
    let [a, b, c, d] = opts.gateway;
    let gateway_ip = Ipv4Address::new(a, b, c, d);
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(guest_ip), opts.ip.prefix_len));
    });
    if iface
        .routes_mut()
        .add_default_ipv4_route(gateway_ip)
        .is_err()
    {
        log::warn!("net: no room for the default route");
    }
    let mut sockets = sockets::Sockets::new();
    let service = crate::runtime::service::RuntimeService::new();
    let gateway = Gateway::new(service, LatencyUnit::Nanoseconds);
    let admission = admission(opts.http.max_conns);
    let config = server::Config {
        port: HTTP_PORT,
        admission,
        timeouts: Timeouts {
            head_ms: opts.http.head_timeout_ms,
            body_ms: opts.http.body_timeout_ms,
            idle_ms: opts.http.idle_timeout_ms,
            send_ms: opts.http.send_timeout_ms,
        },
        limits: Limits {
            max_body_bytes: 2 << 20,
            ..Limits::default()
        },
    };
    let mut server = server::Server::new(config, gateway);
    // The first pass opens the backlog's listening sockets.
    server.service(
        &mut sockets,
        now().total_millis() as u64,
        heap_free(),
        &Vec::new,
    );
    kprintln!("fjord: http listening on {guest_ip}:{HTTP_PORT}");
    log::info!(
        "net: up to {} HTTP connections, backlog {}, timeouts head {} ms, body {} ms, idle {} ms, send {} ms",
        admission.max_open,
        admission.backlog,
        config.timeouts.head_ms,
        config.timeouts.body_ms,
        config.timeouts.idle_ms,
        config.timeouts.send_ms
    );

    let idle_ticks = time::ms_to_ticks(IDLE_AFTER_MS);
    let mut last_busy = cpu::rdtsc();
    let mut last_rx = 0;
    let mut next_sweep = now();
    let mut passes = 0;
    let mut marked = Vec::new();
    loop {
        passes += 1;
        let changed = poll_stack(
            &mut iface,
            &mut dev,
            &mut sockets,
            &mut next_sweep,
            &mut marked,
        );
        let counters = NetCounters {
            rx: dev.rx_packets(),
            tx: dev.tx_packets(),
            errors: dev.errors(),
            sockets: server.counts(),
            max_conns: admission.max_open,
            passes,
        };
        let now_ms = now().total_millis() as u64;
        let served = server.service(&mut sockets, now_ms, heap_free(), &|| {
            kernel_samples(counters)
        });
        // Work queued without an HTTP request (μprocesses' time slices, sleepers whose time
        // came) is dispatched too.
        crate::ufork::wake_sleepers();
        let dispatched = crate::orchestrator::poll() > 0;
        let t = cpu::rdtsc();
        let arrived = dev.rx_packets() != last_rx;
        last_rx = dev.rx_packets();
        if served || dispatched || arrived || changed {
            last_busy = t;
        } else if t.wrapping_sub(last_busy) > idle_ticks {
            crate::arch::smp::halt_idle(crate::arch::percpu::cpu_index());
        } else {
            core::hint::spin_loop();
        }
    }
}

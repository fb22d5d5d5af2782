//! Networking: the smoltcp TCP/IP stack over the virtio-net card (`crate::drivers::virtio_net`),
//! and the HTTP gateway.
//!
//! [`run`] is the boot CPU's network poll loop in `mode=run`. Nothing is interrupt-driven: the
//! loop polls the card and the stack (a bounded batch of received frames per pass, so the
//! server can refill its listening backlog between batches) and serves the sockets. While
//! traffic flows, a pass that found nothing to do halts for [`NAP_US`] (or until an interrupt,
//! such as an executor's wake-up IPI) rather than spinning, so that under an emulator the
//! vCPU leaves its host CPU to the executors' vCPUs and to QEMU's I/O thread; a frame waits at
//! most that long. After [`IDLE_AFTER_MS`] without traffic it halts between timer ticks (10 ms
//! at 100 Hz), so the first packet after a quiet spell waits up to one tick.
//!
//! Addresses come from the `ip=` and `gw=` options; the defaults are QEMU user networking's:
//! the guest is 10.0.2.15/24, the gateway 10.0.2.2.

mod phy;
mod server;
mod sockets;

use crate::arch::{cpu, time};
use crate::kprintln;
use crate::mm::heap;
use alloc::vec::Vec;
use fjord_faas::gateway::admission::{Admission, DEFAULT_BACKLOG, cap_for_memory};
use fjord_faas::gateway::{Gateway, Sample, SampleKind, Timeouts};
use fjord_faas::http::Limits;
use fjord_faas::metrics::LatencyUnit;
use smoltcp::iface::{Config, Interface};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address};

/// The HTTP port.
pub const HTTP_PORT: u16 = 80;
/// Quiet time after which the loop halts between timer ticks.
pub const IDLE_AFTER_MS: u64 = 50;

/// While traffic flows, how long a pass that found nothing to do halts before the next (an
/// interrupt, such as an executor's wake-up IPI, ends it sooner).
pub const NAP_US: u64 = 20;

/// Halts this CPU for `ticks` or until an interrupt: the vCPU leaves its host CPU to the
/// others (the executors' vCPUs, QEMU's I/O thread, the clients) instead of spinning.
fn nap(ticks: u64) {
    cpu::disable_interrupts();
    time::arm_oneshot(ticks);
    crate::arch::smp::halt_idle(crate::arch::percpu::cpu_index());
    time::start_tick();
}

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

/// The kernel's samples for `/metrics`: every subsystem's families, then the network's.
fn kernel_samples(net: NetCounters) -> Vec<Sample> {
    use SampleKind::{Counter, Gauge};
    let mut v = Vec::new();
    crate::arch::metrics::samples(&mut v);
    crate::mm::metrics::samples(&mut v);
    crate::cxl::samples(&mut v);
    crate::jord::metrics::samples(&mut v);
    crate::orchestrator::metrics::samples(&mut v);
    crate::kv::metrics::samples(&mut v);
    crate::module::metrics::samples(&mut v);
    crate::ufork::metrics::samples(&mut v);
    crate::sockets::metrics::samples(&mut v);
    crate::runtime::metrics::samples(&mut v);
    crate::syscalls::metrics::samples(&mut v);
    v.extend([
        Sample::new(
            "fjord_net_received_packets_total",
            Counter,
            "Ethernet frames received by the virtio-net card.",
            &[],
            net.rx,
        ),
        Sample::new(
            "fjord_net_sent_packets_total",
            Counter,
            "Ethernet frames sent by the virtio-net card.",
            &[],
            net.tx,
        ),
        Sample::new(
            "fjord_http_connections_open",
            Gauge,
            "HTTP connections being served.",
            &[],
            net.sockets.open as u64,
        ),
        Sample::new(
            "fjord_http_connections_max",
            Gauge,
            "Most HTTP connections served at once (http_max_conns, or from the heap's size).",
            &[],
            net.max_conns as u64,
        ),
        Sample::new(
            "fjord_http_listening_sockets",
            Gauge,
            "TCP sockets listening for new HTTP connections (the backlog).",
            &[],
            net.sockets.listening as u64,
        ),
        Sample::new(
            "fjord_http_sockets",
            Gauge,
            "TCP sockets of the HTTP server: serving, listening and closing.",
            &[],
            net.sockets.sockets as u64,
        ),
        Sample::new(
            "fjord_net_loop_passes_total",
            Counter,
            "Passes of the network loop (receive a batch, transmit, serve the sockets).",
            &[],
            net.passes,
        ),
        Sample::new(
            "fjord_http_socket_visits_total",
            Counter,
            "Visits of an HTTP socket by the server's passes.",
            &[],
            net.sockets.visits,
        ),
        Sample::new(
            "fjord_net_errors_total",
            Counter,
            "Frames the virtio-net driver failed to send or receive.",
            &[],
            net.errors,
        ),
    ]);
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
    let mut programs = crate::sockets::take_kicked();
    for _ in 0..INGRESS_BATCH {
        let Some(frame) = dev.stage() else {
            break;
        };
        let steered = steer(frame, HTTP_PORT);
        if let fjord_kernel::steer::Steer::Program { connect } = steered {
            programs = true;
            let _ = crate::sockets::with(|table| {
                let r = iface.poll_ingress_single(t, dev, table.set());
                if r != PollIngressSingleResult::None {
                    table.touch();
                }
                if connect {
                    // The SYN took a listening spare: open the next before the next SYN.
                    table.refresh(false);
                }
            });
            continue;
        }
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
    if programs || sweep {
        let _ = crate::sockets::with(|table| {
            table.start_connects(iface.context());
            while iface.poll_egress(t, dev, table.set()) == PollResult::SocketStateChanged {}
            table.refresh(true);
        });
        changed |= programs;
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
    let Some((nic, bus)) = crate::drivers::virtio_net::find() else {
        log::warn!("net: no virtio-net card found; the HTTP gateway and program sockets are off");
        crate::sockets::disable();
        return;
    };
    let mut dev = phy::NetDevice::new(nic);
    let mac = EthernetAddress(dev.mac());
    log::info!("net: virtio-net ({bus}), MAC {mac}");
    let mut config = Config::new(mac.into());
    config.random_seed = crate::random::u64();
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
    kprintln!("fjord: program sockets on {guest_ip} (any port but {HTTP_PORT})");
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
    let nap_ticks = time::ns_to_ticks(NAP_US * 1000);
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
        crate::ufork::wake_socket_waiters();
        crate::cxl::porter::tick();
        let dispatched = crate::orchestrator::poll() > 0;
        let t = cpu::rdtsc();
        let arrived = dev.rx_packets() != last_rx;
        last_rx = dev.rx_packets();
        if served || dispatched || arrived || changed {
            last_busy = t;
        } else if t.wrapping_sub(last_busy) > idle_ticks {
            crate::arch::smp::halt_idle(crate::arch::percpu::cpu_index());
        } else {
            nap(nap_ticks);
        }
    }
}

//! Writing a Fjord function: the entry ABI, the [`function!`](crate::function!) macro, the
//! ArgBuf views and the function error codes.
//!
//! # Entry ABI (version 1)
//!
//! The executor creates a protection domain for each invocation and enters the module's entry
//! point (`_start`, emitted by [`function!`](crate::function!)) in ring 3 with:
//!
//! | register | value |
//! |---|---|
//! | `rdi` | base of the ArgBuf VMA (page-aligned), which the executor `pmove`d to the PD (read-write) |
//! | `rsi` | request length in bytes; the request is `ArgBuf[0 .. rsi]` |
//! | `rdx` | ArgBuf capacity in bytes (a multiple of 4096) |
//! | `rcx` | the *memory boundary* of the PD's instance VMA: the stack is the manifest's `stack_size` bytes below it (growing down), the heap the manifest's `heap_size` bytes above it |
//! | `rsp` | top of the PD's small creation stack; the entry stub switches to the instance stack at once |
//! | FS base | the heap header: the top [`HEADER_BYTES`](crate::heap::HEADER_BYTES) bytes below the boundary, where the executor wrote the [`heap`](crate::heap) allocator's state; the stack starts below it |
//!
//! The response goes to `ArgBuf[response_offset(rsi) .. rdx]`, a region that never overlaps the
//! request, so the handler gets both as plain slices without copying. The function ends with
//! `creturn(value)`: a value `>= 0` is the response length, a negative value `-code` is an
//! [`FnError`]. Leaving the entry any other way (a fault, `exit`, running past the deadline) is
//! reported by the executor as a failure of the invocation.
//!
//! When the heap header's init word is [`INIT_PENDING`](crate::heap::INIT_PENDING), the call
//! is the instance's `init` (see [`function!`](crate::function!)), the ArgBuf holds the warm-up
//! input, and the function ends with `creturn(0)` or an error.
//!
//! # No writable statics
//!
//! A module's code is mapped once, as one Global read-execute VMA shared by every instance, and
//! RIP-relative references to statics name the same bytes in every PD. Per-instance state can
//! therefore only live on the stack, in the heap and in the ArgBuf; the loader rejects modules
//! with writable data outside `PT_GNU_RELRO` (relocated once at load, then read-only). Nothing
//! in this module keeps state in a static: the global allocator ([`crate::heap`]) finds its
//! state through the thread pointer.

/// The request/response ABI version the loader and [`function!`](crate::function!) agree on.
pub const ABI_VERSION: u32 = 1;

/// Alignment of the response region after the request.
pub const RESPONSE_ALIGN: usize = 64;

/// Where the response region starts in an ArgBuf holding a request of `request_len` bytes.
pub const fn response_offset(request_len: usize) -> usize {
    request_len.next_multiple_of(RESPONSE_ALIGN)
}

/// Response room an external invocation's ArgBuf gets beyond the request's own size (the
/// gateway's default; the kernel's invoke path, the host test env and the Linux baseline use it).
pub const DEFAULT_RESPONSE_ROOM: usize = 1024;

/// ArgBuf capacities are whole pages of this size.
pub const ARGBUF_PAGE: usize = 4096;

/// The size an ArgBuf asked for `capacity` bytes gets: whole pages, at least one.
pub const fn argbuf_size(capacity: usize) -> usize {
    if capacity == 0 {
        ARGBUF_PAGE
    } else {
        capacity.next_multiple_of(ARGBUF_PAGE)
    }
}

/// The capacity of an ArgBuf holding a request of `request_len` bytes and `room` bytes of
/// response after it: whole pages, at least one.
pub const fn argbuf_capacity(request_len: usize, room: usize) -> usize {
    argbuf_size(response_offset(request_len) + room)
}

/// The capacity of an external invocation's ArgBuf for a request of `request_len` bytes: room
/// for a response of the request's size plus [`DEFAULT_RESPONSE_ROOM`].
pub const fn external_capacity(request_len: usize) -> usize {
    argbuf_capacity(request_len, request_len + DEFAULT_RESPONSE_ROOM)
}

/// Why a function did not produce a response; the discriminant is the stable code (returned
/// negated with `creturn`).
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnError {
    /// The request is malformed for this function.
    BadRequest = 1,
    /// The response does not fit in the ArgBuf's response region.
    ResponseTooLarge = 2,
    /// The function ran out of its heap.
    OutOfMemory = 3,
    /// The function panicked (the message went to the kernel log).
    Panicked = 4,
    /// The entry was called with an ArgBuf that breaks the ABI.
    BadArgBuf = 5,
    /// Any other failure of the function's own logic.
    Failed = 6,
}

impl FnError {
    /// Every defined error, in code order.
    pub const ALL: [FnError; 6] = [
        FnError::BadRequest,
        FnError::ResponseTooLarge,
        FnError::OutOfMemory,
        FnError::Panicked,
        FnError::BadArgBuf,
        FnError::Failed,
    ];

    /// The `creturn` value for this error.
    pub const fn to_ret(self) -> u64 {
        (-(self as i64)) as u64
    }

    /// The error whose code is `code` (positive), if one is defined.
    pub fn from_code(code: i64) -> Option<FnError> {
        Self::ALL.into_iter().find(|e| *e as i64 == code)
    }
}

/// A decoded `creturn` value of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnReturn {
    /// A response of this many bytes.
    Response(u64),
    /// A known function error.
    Error(FnError),
    /// A negative value that is no defined error code.
    UnknownError(i64),
}

impl FnReturn {
    /// Decodes the value a function passed to `creturn`.
    pub fn decode(value: u64) -> FnReturn {
        let v = value as i64;
        if v >= 0 {
            FnReturn::Response(value)
        } else {
            match v.checked_neg().and_then(FnError::from_code) {
                Some(e) => FnReturn::Error(e),
                None => FnReturn::UnknownError(v),
            }
        }
    }
}

/// The signature of a function's handler: the request and the response region in; the
/// response length (at most `resp.len()`) or an error out.
pub type Handler = fn(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError>;

/// Where a response of `response_len` bytes may go in an ArgBuf of `capacity` bytes holding a
/// request of `request_len`: `Some(start..end)` when it fits.
pub fn response_range(
    request_len: usize,
    capacity: usize,
    response_len: usize,
) -> Option<core::ops::Range<usize>> {
    let start = response_offset(request_len);
    let end = start.checked_add(response_len)?;
    (request_len <= capacity && end <= capacity).then_some(start..end)
}

/// Runs `handler` on the ArgBuf described by the entry registers and returns the `creturn`
/// value: the response length or a negated [`FnError`] code.
///
/// # Safety
///
/// `base .. base + capacity` must be memory the caller may read and write, that nothing else
/// accesses while this runs (the ArgBuf VMA `pmove`d to this PD).
pub unsafe fn serve(base: u64, request_len: u64, capacity: u64, handler: Handler) -> u64 {
    // SAFETY: forwarded from the caller's contract.
    unsafe { serve_with(base, request_len, capacity, handler) }
}

/// [`serve`] with any handler (a closure).
///
/// # Safety
///
/// As for [`serve`].
unsafe fn serve_with(
    base: u64,
    request_len: u64,
    capacity: u64,
    handler: impl FnOnce(&[u8], &mut [u8]) -> Result<usize, FnError>,
) -> u64 {
    let (Ok(request_len), Ok(capacity)) = (usize::try_from(request_len), usize::try_from(capacity))
    else {
        return FnError::BadArgBuf.to_ret();
    };
    let Some(resp_range) = response_range(request_len, capacity, 0) else {
        return FnError::BadArgBuf.to_ret();
    };
    if base == 0 || base.checked_add(capacity as u64).is_none() {
        return FnError::BadArgBuf.to_ret();
    }
    let start = resp_range.start;
    let ptr = base as *mut u8;
    // SAFETY: `request_len <= start <= capacity` (checked above), so the two slices are disjoint
    // parts of the ArgBuf, which the caller guarantees is ours alone for the call.
    let (req, resp) = unsafe {
        (
            core::slice::from_raw_parts(ptr, request_len),
            core::slice::from_raw_parts_mut(ptr.add(start), capacity - start),
        )
    };
    let room = resp.len();
    match handler(req, resp) {
        Ok(n) if n <= room => n as u64,
        Ok(_) => FnError::ResponseTooLarge.to_ret(),
        Err(e) => e.to_ret(),
    }
}

/// A function's `init`: builds, from the deployer's warm-up input, the state every request of
/// the instance starts from (it is part of the instance's snapshot).
pub type Init<S> = fn(warmup: &[u8]) -> Result<S, FnError>;

/// The handler of a function with an `init`: its state, the request and the response region
/// in; the response length or an error out. What it changes in the state lasts until the
/// instance is restored (after this request, in the default Groundhog mode).
pub type StatefulHandler<S> =
    fn(state: &mut S, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError>;

/// Runs `init` (when the executor asks for it: the heap header's init word is
/// [`INIT_PENDING`](crate::heap::INIT_PENDING)) or `handler` on the state `init` built, on the
/// ArgBuf described by the entry registers; returns the `creturn` value. `init` keeps its state
/// on the instance's heap and ends with a response of length 0.
///
/// # Safety
///
/// As for [`serve`]; and the heap header's init word, when it is neither 0 nor
/// `INIT_PENDING`, is the address `init` stored for an `S` of this same module.
#[cfg(target_arch = "x86_64")]
pub unsafe fn serve_stateful<S>(
    base: u64,
    request_len: u64,
    capacity: u64,
    init: Init<S>,
    handler: StatefulHandler<S>,
) -> u64 {
    let heap = crate::heap::FunctionHeap::heap();
    match heap.init_word() {
        crate::heap::INIT_PENDING => {
            let run = |warmup: &[u8], _: &mut [u8]| {
                let state = init(warmup)?;
                let slot = heap.alloc(core::alloc::Layout::new::<S>()).cast::<S>();
                if slot.is_null() {
                    return Err(FnError::OutOfMemory);
                }
                // SAFETY: `slot` is a fresh block of the heap, sized and aligned for an `S`.
                unsafe { slot.write(state) };
                heap.set_init_word(slot as u64);
                Ok(0)
            };
            // SAFETY: forwarded from the caller's contract.
            unsafe { serve_with(base, request_len, capacity, run) }
        }
        0 => FnError::Failed.to_ret(),
        word => {
            // SAFETY: the caller guarantees `word` is the `S` this module's `init` stored; the
            // instance runs one request at a time, so nothing else uses it meanwhile.
            let state = unsafe { &mut *(word as *mut S) };
            // SAFETY: forwarded from the caller's contract.
            unsafe {
                serve_with(base, request_len, capacity, |req, resp| {
                    handler(state, req, resp)
                })
            }
        }
    }
}

/// A fixed-capacity text buffer for formatting without a heap (panic messages).
pub struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }

    /// The text written so far (cut at a character boundary when it overflowed).
    pub fn as_str(&self) -> &str {
        match core::str::from_utf8(&self.buf[..self.len]) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&self.buf[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(core::fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Reports a panic to the kernel log and ends the call with [`FnError::Panicked`].
#[cfg(target_arch = "x86_64")]
pub fn report_panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let mut text = StackText::<256>::new();
    let _ = write!(text, "function panicked: {info}");
    let _ = crate::syscall::log(text.as_str());
    crate::privlib::creturn(FnError::Panicked.to_ret())
}

/// Copies a manifest text into the fixed-size array placed in `.fjord_manifest`.
pub const fn manifest_bytes<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N && i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// The manifest text for `name` and further `key = value` pairs, as a `&'static str`:
/// `fjord-manifest=1`, then one `key=value` line each. Only the keys of manifest version 1 are
/// accepted (`entry`, `stack_size`, `heap_size`, `groundhog`, `time_limit_ms`,
/// `memory_limit`, `max_pds`, `app`, `kv_quota`, `log_limit`, `warmup`, `kind`,
/// `max_processes`); values are
/// literals (`stack_size = "128K"`, `heap_size = 65536`, `groundhog = "restore"`). `init` is
/// written by [`function!`](crate::function!) when it is given one.
#[macro_export]
macro_rules! manifest_text {
    (name = $name:literal $(, $key:ident = $value:literal)* $(,)?) => {
        concat!(
            "fjord-manifest=1\nname=", $name, "\n",
            $($crate::__manifest_key!($key), "=", $value, "\n",)*
        )
    };
}

/// The manifest keys [`manifest_text!`] accepts (any other is a compile error).
#[doc(hidden)]
#[macro_export]
macro_rules! __manifest_key {
    (entry) => {
        "entry"
    };
    (stack_size) => {
        "stack_size"
    };
    (heap_size) => {
        "heap_size"
    };
    (groundhog) => {
        "groundhog"
    };
    (time_limit_ms) => {
        "time_limit_ms"
    };
    (memory_limit) => {
        "memory_limit"
    };
    (max_pds) => {
        "max_pds"
    };
    (app) => {
        "app"
    };
    (kv_quota) => {
        "kv_quota"
    };
    (log_limit) => {
        "log_limit"
    };
    (warmup) => {
        "warmup"
    };
    (kind) => {
        "kind"
    };
    (max_processes) => {
        "max_processes"
    };
}

/// The heap allocator and the `_start` stub of a module (function or program): switch to the
/// instance stack below the heap header under the memory boundary (`rcx`), keep the argument
/// registers, and call `$main`.
#[doc(hidden)]
#[macro_export]
macro_rules! __entry {
    ($main:ident) => {
        /// `alloc` in modules: the heap of the PD's instance VMA (a μprocess's area).
        #[global_allocator]
        static HEAP: $crate::heap::FunctionHeap = $crate::heap::FunctionHeap;

        /// The entry point.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        extern "C" fn _start() -> ! {
            ::core::arch::naked_asm!(
                "lea rsp, [rcx - {header}]",
                "and rsp, -16",
                "xor ebp, ebp",
                "call {main}",
                "ud2",
                main = sym $main,
                header = const $crate::heap::HEADER_BYTES,
            )
        }
    };
}

/// Declares the crate a Fjord function whose requests `handler` (a [`Handler`]) serves.
///
/// ```ignore
/// #![cfg_attr(target_os = "none", no_std, no_main)]
/// fn hello(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> { ... }
/// fjord_libos::function!(hello, name = "hello", stack_size = "64K", heap_size = 0);
/// ```
///
/// On `x86_64-unknown-none` it emits the `.fjord_manifest` section (see [`manifest_text!`] for
/// the keys), the `_start` entry stub of the [entry ABI](self) and a panic handler that logs the
/// message and returns [`FnError::Panicked`]. On the host it emits a `main` that serves one
/// request read from stdin and writes the response to stdout, for trying a function out.
///
/// With `init = <fn>` right after the handler (an [`Init<S>`]), the handler is a
/// [`StatefulHandler<S>`]: the executor runs `init` once per instance with the manifest's
/// `warmup` input, snapshots the instance, and every request starts from that snapshot (see
/// [`serve_stateful`]).
///
/// ```ignore
/// fn init(warmup: &[u8]) -> Result<Table, FnError> { ... }
/// fn lookup(t: &mut Table, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> { ... }
/// fjord_libos::function!(lookup, init = init, name = "lookup", warmup = "key=1");
/// ```
#[macro_export]
macro_rules! function {
    ($handler:path, init = $init:path, name = $name:literal $(, $key:ident = $value:literal)* $(,)?) => {
        #[cfg(target_os = "none")]
        const _: () = {
            const TEXT: &str = concat!(
                $crate::manifest_text!(name = $name $(, $key = $value)*),
                "init=on\n"
            );

            #[unsafe(link_section = ".fjord_manifest")]
            #[used]
            static MANIFEST: [u8; TEXT.len()] = $crate::function::manifest_bytes(TEXT);

            extern "C" fn fjord_function_main(base: u64, len: u64, capacity: u64) -> ! {
                // SAFETY: the executor enters `_start` per the entry ABI: the ArgBuf is this
                // PD's alone for the call, and the init word is what this module's `init`
                // stored (or 0, or INIT_PENDING).
                let value = unsafe {
                    $crate::function::serve_stateful(base, len, capacity, $init, $handler)
                };
                $crate::privlib::creturn(value)
            }

            $crate::__entry!(fjord_function_main);

            #[panic_handler]
            fn panic(info: &::core::panic::PanicInfo<'_>) -> ! {
                $crate::function::report_panic(info)
            }
        };

        #[cfg(not(target_os = "none"))]
        fn main() {
            use ::std::io::{Read, Write};
            let mut req = ::std::vec::Vec::new();
            if let Err(e) = ::std::io::stdin().read_to_end(&mut req) {
                ::std::eprintln!("reading the request: {e}");
                ::std::process::exit(2);
            }
            let mut state = match $init(b"") {
                Ok(s) => s,
                Err(e) => {
                    ::std::eprintln!("init error: {e:?}");
                    ::std::process::exit(1);
                }
            };
            let mut resp = ::std::vec![0u8; 64 * 1024];
            match $handler(&mut state, &req, &mut resp) {
                Ok(n) => {
                    let _ = ::std::io::stdout().write_all(&resp[..n.min(resp.len())]);
                }
                Err(e) => {
                    ::std::eprintln!("function error: {e:?}");
                    ::std::process::exit(1);
                }
            }
        }
    };
    ($handler:path, name = $name:literal $(, $key:ident = $value:literal)* $(,)?) => {
        #[cfg(target_os = "none")]
        const _: () = {
            const TEXT: &str = $crate::manifest_text!(name = $name $(, $key = $value)*);

            #[unsafe(link_section = ".fjord_manifest")]
            #[used]
            static MANIFEST: [u8; TEXT.len()] = $crate::function::manifest_bytes(TEXT);

            extern "C" fn fjord_function_main(base: u64, len: u64, capacity: u64) -> ! {
                // SAFETY: the executor enters `_start` per the entry ABI: the ArgBuf is this
                // PD's alone for the call.
                let value = unsafe { $crate::function::serve(base, len, capacity, $handler) };
                $crate::privlib::creturn(value)
            }

            $crate::__entry!(fjord_function_main);

            #[panic_handler]
            fn panic(info: &::core::panic::PanicInfo<'_>) -> ! {
                $crate::function::report_panic(info)
            }
        };

        #[cfg(not(target_os = "none"))]
        fn main() {
            use ::std::io::{Read, Write};
            let mut req = ::std::vec::Vec::new();
            if let Err(e) = ::std::io::stdin().read_to_end(&mut req) {
                ::std::eprintln!("reading the request: {e}");
                ::std::process::exit(2);
            }
            let mut resp = ::std::vec![0u8; 64 * 1024];
            let handler: $crate::function::Handler = $handler;
            match handler(&req, &mut resp) {
                Ok(n) => {
                    let _ = ::std::io::stdout().write_all(&resp[..n.min(resp.len())]);
                }
                Err(e) => {
                    ::std::eprintln!("function error: {e:?}");
                    ::std::process::exit(1);
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_text_has_every_key_once() {
        const T: &str = crate::manifest_text!(
            name = "hello",
            stack_size = "64K",
            heap_size = 0,
            groundhog = "off"
        );
        assert_eq!(
            T,
            "fjord-manifest=1\nname=hello\nstack_size=64K\nheap_size=0\ngroundhog=off\n"
        );
        let parsed = fjord_faas::module::Manifest::parse(T.as_bytes()).unwrap();
        assert_eq!(parsed.name.as_str(), "hello");
        assert_eq!((parsed.stack_size, parsed.heap_size), (64 * 1024, 0));
        const A: [u8; 80] = manifest_bytes(T);
        assert_eq!(fjord_faas::module::Manifest::parse(&A), Ok(parsed));
    }

    #[test]
    fn minimal_manifest_parses_with_defaults() {
        const T: &str = crate::manifest_text!(name = "echo");
        let m = fjord_faas::module::Manifest::parse(T.as_bytes()).unwrap();
        assert_eq!(
            m.stack_size,
            fjord_faas::module::manifest::DEFAULT_STACK_SIZE
        );
    }

    #[test]
    fn error_codes_round_trip_through_creturn() {
        for e in FnError::ALL {
            assert_eq!(FnReturn::decode(e.to_ret()), FnReturn::Error(e));
        }
        assert_eq!(FnReturn::decode(12), FnReturn::Response(12));
        assert_eq!(
            FnReturn::decode((-99i64) as u64),
            FnReturn::UnknownError(-99)
        );
        assert_eq!(
            FnReturn::decode(i64::MIN as u64),
            FnReturn::UnknownError(i64::MIN)
        );
    }

    #[test]
    fn argbuf_capacities_are_whole_pages_with_room_after_the_request() {
        assert_eq!(argbuf_capacity(0, 0), 4096);
        assert_eq!(argbuf_capacity(5, 10), 4096);
        assert_eq!(argbuf_capacity(4096, 1), 8192);
        assert_eq!(argbuf_capacity(65, 4096 - 128), 4096);
        assert_eq!(argbuf_capacity(65, 4096 - 127), 8192);
        // External: the request, the same again and 1 KiB of response room.
        assert_eq!(external_capacity(100), 4096);
        assert_eq!(external_capacity(3000), 8192);
        // Any asked-for size: whole pages, at least one.
        assert_eq!(
            [0, 1, 4096, 4097].map(argbuf_size),
            [4096, 4096, 4096, 8192]
        );
    }

    #[test]
    fn response_region_follows_the_request() {
        assert_eq!(response_offset(0), 0);
        assert_eq!(response_offset(5), 64);
        assert_eq!(response_range(5, 4096, 10), Some(64..74));
        assert_eq!(response_range(5, 4096, 4033), None);
        assert_eq!(response_range(4096, 4096, 0), Some(4096..4096));
        assert_eq!(response_range(4097, 4096, 0), None);
        assert_eq!(response_range(5, 4096, usize::MAX), None);
    }

    fn upper(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
        let out = resp.get_mut(..req.len()).ok_or(FnError::ResponseTooLarge)?;
        for (o, i) in out.iter_mut().zip(req) {
            *o = i.to_ascii_uppercase();
        }
        Ok(req.len())
    }

    fn liar(_: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
        Ok(resp.len() + 1)
    }

    #[test]
    fn serve_splits_the_argbuf() {
        let mut buf = [0u8; 256];
        buf[..3].copy_from_slice(b"abc");
        let base = buf.as_mut_ptr() as u64;
        // SAFETY: `buf` is a live local array of 256 bytes used by nothing else meanwhile.
        let v = unsafe { serve(base, 3, 256, upper) };
        assert_eq!(v, 3);
        assert_eq!(&buf[64..67], b"ABC");
        // SAFETY: as above.
        let v = unsafe { serve(base, 3, 256, liar) };
        assert_eq!(
            FnReturn::decode(v),
            FnReturn::Error(FnError::ResponseTooLarge)
        );
        // SAFETY: as above; the bad lengths are rejected before any access.
        let v = unsafe { serve(base, 300, 256, upper) };
        assert_eq!(FnReturn::decode(v), FnReturn::Error(FnError::BadArgBuf));
    }

    #[test]
    fn stack_text_truncates_at_char_boundary() {
        use core::fmt::Write;
        let mut t = StackText::<4>::new();
        assert!(write!(t, "ab\u{e9}\u{e9}").is_err());
        assert_eq!(t.as_str(), "ab\u{e9}");
    }
}

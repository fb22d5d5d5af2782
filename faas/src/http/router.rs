//! The gateway API mapped to typed routes.
//!
//! | method | path | route |
//! |---|---|---|
//! | `POST` | `/invoke/<fn>` | [`Route::Invoke`] |
//! | `PUT` | `/functions/<name>` | [`Route::Deploy`] |
//! | `GET` | `/functions` | [`Route::ListFunctions`] |
//! | `DELETE` | `/functions/<name>` | [`Route::Remove`] |
//! | `GET` | `/metrics` | [`Route::Metrics`] |
//! | `POST` | `/processes/<program>` | [`Route::StartProcess`] |
//! | `GET` | `/processes` | [`Route::ListProcesses`] |
//! | `DELETE` | `/processes/<pid>` | [`Route::KillProcess`] |
//! | `POST` | `/processes/<pid>/checkpoint` | [`Route::CheckpointProcess`] |
//! | `POST` | `/functions/<name>/checkpoint` | [`Route::CheckpointFunction`] |
//! | `DELETE` | `/functions/<name>/zygote` | [`Route::DropZygote`] |
//! | `POST` | `/processes/<pid>/reset-accessed` | [`Route::ResetAccessed`] |
//! | `GET` | `/checkpoints` | [`Route::ListCheckpoints`] |
//! | `POST` | `/checkpoints/<id>/restore` | [`Route::RestoreCheckpoint`] |
//! | `DELETE` | `/checkpoints/<id>` | [`Route::RetireCheckpoint`] |
//!
//! Paths match exactly (no trailing slash, no percent-decoding: valid names need none); the query
//! string is ignored. An unknown path is 404, a known path with another method 405 with an
//! `Allow` header, an invalid function name 400.

use super::request::Method;
use super::response::{Response, Status};
use crate::function_name::{FunctionName, NameError};
use crate::gateway::checkpoints::CheckpointId;

/// A request the API understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Invoke a function with the request body as its input.
    Invoke(FunctionName),
    /// Deploy (or replace) a function module; the body is the ELF image.
    Deploy(FunctionName),
    /// List deployed functions.
    ListFunctions,
    /// Remove a deployed function.
    Remove(FunctionName),
    /// Prometheus metrics.
    Metrics,
    /// Start a program as a μprocess.
    StartProcess(FunctionName),
    /// List the μprocesses.
    ListProcesses,
    /// Kill the μprocess with this PID.
    KillProcess(u64),
    /// Checkpoint the μprocess with this PID into the shared region.
    CheckpointProcess(u64),
    /// Checkpoint this fork-per-request function's zygote into the shared region.
    CheckpointFunction(FunctionName),
    /// Destroy this node's warm zygote of this fork-per-request function.
    DropZygote(FunctionName),
    /// Clear the accessed bits of the μprocess with this PID (what its next checkpoint records
    /// as accessed starts now).
    ResetAccessed(u64),
    /// List the checkpoints of the shared region.
    ListCheckpoints,
    /// Restore this checkpoint as a μprocess of this node.
    RestoreCheckpoint(CheckpointId),
    /// Retire this checkpoint.
    RetireCheckpoint(CheckpointId),
}

/// Why a request matches no route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// No route has this path (404).
    NotFound,
    /// The path exists but not for this method (405); `allow` lists the methods it accepts.
    MethodNotAllowed {
        /// Value for the `Allow` header.
        allow: &'static str,
    },
    /// The function name in the path is invalid (400).
    InvalidName(NameError),
    /// The PID in the path is not a decimal number (400).
    InvalidPid,
    /// The checkpoint identity in the path is not `<slot>.<epoch>` (400).
    InvalidCheckpoint,
}

impl RouteError {
    /// The status code for this error.
    pub fn status(self) -> Status {
        match self {
            RouteError::NotFound => Status::NotFound,
            RouteError::MethodNotAllowed { .. } => Status::MethodNotAllowed,
            RouteError::InvalidName(_) | RouteError::InvalidPid | RouteError::InvalidCheckpoint => {
                Status::BadRequest
            }
        }
    }

    /// The complete error response (with `Allow` for 405).
    pub fn response(self) -> Response {
        let msg = match self {
            RouteError::NotFound => alloc::string::String::from("no such endpoint\n"),
            RouteError::MethodNotAllowed { .. } => {
                alloc::string::String::from("method not allowed\n")
            }
            RouteError::InvalidName(e) => alloc::format!("{e}\n"),
            RouteError::InvalidPid => alloc::string::String::from("invalid process id\n"),
            RouteError::InvalidCheckpoint => {
                alloc::string::String::from("invalid checkpoint id: <slot>.<epoch>\n")
            }
        };
        let r = Response::text(self.status(), &msg);
        match self {
            RouteError::MethodNotAllowed { allow } => r.clone().header("Allow", allow).unwrap_or(r),
            _ => r,
        }
    }
}

/// Maps a method and path (query already stripped or not) to a route.
pub fn route(method: Method, target: &str) -> Result<Route, RouteError> {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let named = |name: &str| FunctionName::new(name).map_err(RouteError::InvalidName);
    let expect = |m: Method, allow: &'static str| {
        if method == m {
            Ok(())
        } else {
            Err(RouteError::MethodNotAllowed { allow })
        }
    };
    if let Some(name) = path.strip_prefix("/invoke/") {
        expect(Method::Post, "POST")?;
        return named(name).map(Route::Invoke);
    }
    if let Some((name, action)) = path
        .strip_prefix("/functions/")
        .and_then(|r| r.split_once('/'))
    {
        return match action {
            "checkpoint" => {
                expect(Method::Post, "POST")?;
                named(name).map(Route::CheckpointFunction)
            }
            "zygote" => {
                expect(Method::Delete, "DELETE")?;
                named(name).map(Route::DropZygote)
            }
            _ => Err(RouteError::NotFound),
        };
    }
    if let Some(name) = path.strip_prefix("/functions/") {
        return match method {
            Method::Put => named(name).map(Route::Deploy),
            Method::Delete => named(name).map(Route::Remove),
            _ => Err(RouteError::MethodNotAllowed {
                allow: "PUT, DELETE",
            }),
        };
    }
    let pid = |s: &str| {
        s.parse::<u64>()
            .ok()
            .filter(|_| !s.starts_with('+'))
            .ok_or(RouteError::InvalidPid)
    };
    if let Some(rest) = path.strip_prefix("/processes/")
        && let Some((p, action)) = rest.split_once('/')
    {
        let route = match action {
            "checkpoint" => Route::CheckpointProcess(pid(p)?),
            "reset-accessed" => Route::ResetAccessed(pid(p)?),
            _ => return Err(RouteError::NotFound),
        };
        expect(Method::Post, "POST")?;
        return Ok(route);
    }
    if let Some(rest) = path.strip_prefix("/checkpoints/") {
        let id = |s: &str| CheckpointId::parse(s).ok_or(RouteError::InvalidCheckpoint);
        return match rest.split_once('/') {
            Some((c, "restore")) => {
                expect(Method::Post, "POST")?;
                id(c).map(Route::RestoreCheckpoint)
            }
            Some(_) => Err(RouteError::NotFound),
            None => {
                expect(Method::Delete, "DELETE")?;
                id(rest).map(Route::RetireCheckpoint)
            }
        };
    }
    if let Some(rest) = path.strip_prefix("/processes/") {
        return match method {
            Method::Post => named(rest).map(Route::StartProcess),
            Method::Delete => pid(rest).map(Route::KillProcess),
            _ => Err(RouteError::MethodNotAllowed {
                allow: "POST, DELETE",
            }),
        };
    }
    match path {
        "/processes" => expect(Method::Get, "GET").map(|()| Route::ListProcesses),
        "/checkpoints" => expect(Method::Get, "GET").map(|()| Route::ListCheckpoints),
        "/functions" => expect(Method::Get, "GET").map(|()| Route::ListFunctions),
        "/metrics" => expect(Method::Get, "GET").map(|()| Route::Metrics),
        _ => Err(RouteError::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> FunctionName {
        FunctionName::new(s).unwrap()
    }

    #[test]
    fn routes_the_api() {
        assert_eq!(
            route(Method::Post, "/invoke/hello"),
            Ok(Route::Invoke(name("hello")))
        );
        assert_eq!(
            route(Method::Post, "/invoke/hello?x=1"),
            Ok(Route::Invoke(name("hello")))
        );
        assert_eq!(
            route(Method::Put, "/functions/f-1"),
            Ok(Route::Deploy(name("f-1")))
        );
        assert_eq!(
            route(Method::Delete, "/functions/f_1"),
            Ok(Route::Remove(name("f_1")))
        );
        assert_eq!(route(Method::Get, "/functions"), Ok(Route::ListFunctions));
        assert_eq!(route(Method::Get, "/metrics"), Ok(Route::Metrics));
        assert_eq!(
            route(Method::Post, "/processes/init"),
            Ok(Route::StartProcess(name("init")))
        );
        assert_eq!(route(Method::Get, "/processes"), Ok(Route::ListProcesses));
        assert_eq!(
            route(Method::Delete, "/processes/42"),
            Ok(Route::KillProcess(42))
        );
        let code = |m, p| route(m, p).unwrap_err().status().code();
        assert_eq!(code(Method::Delete, "/processes/x"), 400);
        assert_eq!(code(Method::Delete, "/processes/+1"), 400);
        assert_eq!(code(Method::Delete, "/processes/"), 400);
        assert_eq!(code(Method::Get, "/processes/1"), 405);
        assert_eq!(code(Method::Post, "/processes"), 405);
    }

    #[test]
    fn routes_the_checkpoint_api() {
        let id = CheckpointId { slot: 2, epoch: 5 };
        assert_eq!(
            route(Method::Post, "/processes/7/checkpoint"),
            Ok(Route::CheckpointProcess(7))
        );
        assert_eq!(
            route(Method::Post, "/processes/7/reset-accessed"),
            Ok(Route::ResetAccessed(7))
        );
        assert_eq!(
            route(Method::Get, "/checkpoints"),
            Ok(Route::ListCheckpoints)
        );
        assert_eq!(
            route(Method::Post, "/checkpoints/2.5/restore?tiering=access"),
            Ok(Route::RestoreCheckpoint(id))
        );
        assert_eq!(
            route(Method::Delete, "/checkpoints/2.5"),
            Ok(Route::RetireCheckpoint(id))
        );
        let code = |m, p| route(m, p).unwrap_err().status().code();
        assert_eq!(code(Method::Post, "/processes/x/checkpoint"), 400);
        assert_eq!(code(Method::Get, "/processes/7/checkpoint"), 405);
        assert_eq!(code(Method::Post, "/processes/7/other"), 404);
        assert_eq!(code(Method::Post, "/checkpoints/2/restore"), 400);
        assert_eq!(code(Method::Get, "/checkpoints/2.5/restore"), 405);
        assert_eq!(code(Method::Post, "/checkpoints/2.5/other"), 404);
        assert_eq!(code(Method::Post, "/checkpoints/2.5"), 405);
        assert_eq!(code(Method::Delete, "/checkpoints/x"), 400);
        assert_eq!(code(Method::Post, "/checkpoints"), 405);
        assert_eq!(code(Method::Put, "/functions/f/checkpoint"), 405);
        assert_eq!(
            route(Method::Delete, "/functions/f/zygote"),
            Ok(Route::DropZygote(name("f")))
        );
        assert_eq!(code(Method::Post, "/functions/f/zygote"), 405);
        assert_eq!(code(Method::Post, "/functions/f/other"), 404);
        assert_eq!(code(Method::Post, "/functions/F/checkpoint"), 400);
    }

    #[test]
    fn rejects_with_the_right_status() {
        let code = |m, p| route(m, p).unwrap_err().status().code();
        assert_eq!(code(Method::Get, "/"), 404);
        assert_eq!(code(Method::Get, "/metrics/"), 404);
        assert_eq!(code(Method::Get, "/functionsx"), 404);
        assert_eq!(code(Method::Get, "/invoke/hello"), 405);
        assert_eq!(code(Method::Post, "/functions/x"), 405);
        assert_eq!(code(Method::Post, "/metrics"), 405);
        assert_eq!(code(Method::Delete, "/functions"), 405);
        assert_eq!(code(Method::Post, "/invoke/"), 400);
        assert_eq!(code(Method::Post, "/invoke/a/b"), 400);
        assert_eq!(code(Method::Put, "/functions/Upper"), 400);
        assert_eq!(code(Method::Post, "/invoke/%41"), 400);
        let r = route(Method::Get, "/invoke/x")
            .unwrap_err()
            .response()
            .to_bytes();
        assert!(r.starts_with(b"HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(r.windows(13).any(|w| w == b"Allow: POST\r\n"));
    }
}

//! The in-kernel test descriptor and assertion macros.
//!
//! A test is a `fn() -> TestResult`; it fails by returning an error message (the kernel does not
//! unwind, so a failing assertion returns instead of panicking). The kernel binary's `ktest!`
//! macro places a [`KTest`] in the `.ktests` linker section, and its runner walks that section.

use alloc::string::String;

/// The outcome of one in-kernel test.
pub type TestResult = Result<(), String>;

/// One registered in-kernel test.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct KTest {
    /// Full name (`module::test`).
    pub name: &'static str,
    /// The test body.
    pub run: fn() -> TestResult,
    /// Minutes rather than seconds where the guest's ring 0 is emulated: `slow_tests=skip`
    /// reports it as not run there (TCG and hardware KVM run every test).
    pub slow: bool,
}

/// Fails the current test unless `cond` holds.
#[macro_export]
macro_rules! kassert {
    ($cond:expr $(,)?) => {
        if !$cond {
            return Err(::alloc::format!("{}:{}: assertion failed: {}", file!(), line!(), stringify!($cond)));
        }
    };
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(::alloc::format!("{}:{}: {}", file!(), line!(), ::alloc::format!($($fmt)+)));
        }
    };
}

/// Fails the current test unless both values are equal.
#[macro_export]
macro_rules! kassert_eq {
    ($a:expr, $b:expr $(,)?) => {
        match (&$a, &$b) {
            (a, b) => {
                if a != b {
                    return Err(::alloc::format!(
                        "{}:{}: {} == {} failed: {:?} != {:?}",
                        file!(),
                        line!(),
                        stringify!($a),
                        stringify!($b),
                        a,
                        b
                    ));
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes() -> TestResult {
        let two = [1, 1].iter().sum::<i32>();
        kassert!(two == 2);
        kassert_eq!(2 * 2, 4);
        Ok(())
    }

    fn fails() -> TestResult {
        kassert_eq!(1, 2);
        Ok(())
    }

    fn fails_with_message() -> TestResult {
        kassert!(false, "value was {}", 7);
        Ok(())
    }

    #[test]
    fn assertions_return_errors() {
        assert!(passes().is_ok());
        let e = fails().unwrap_err();
        assert!(e.contains("1 == 2 failed: 1 != 2"), "{e}");
        assert!(fails_with_message().unwrap_err().contains("value was 7"));
    }
}

//! The Jord paper's FaaS workloads as ported to Fjord (`apps/hotel`, `apps/social`,
//! `apps/media`, `apps/hipster`; see `apps/WORKLOADS.md`): the two operations of each that the
//! paper studies (its Table 3), with a sample request for the operation's entry function and
//! bytes its response must contain.
//!
//! Every sample is repeatable: sent thousands of times it keeps succeeding and the state it
//! leaves in the kernel's key-value store stays bounded (timelines and review lists are capped,
//! slots are reused, a full hotel answers `reservation=unavailable`).

/// One operation of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The workload: `hotel`, `social`, `media` or `hipster`.
    pub workload: &'static str,
    /// The operation's name (`search_nearby`, ...), also the request's `op=` value.
    pub name: &'static str,
    /// The function that serves the operation's requests (the workload's frontend).
    pub entry: &'static str,
    /// A valid sample request for `entry`.
    pub request: &'static [u8],
    /// Bytes that a successful response to `request` contains.
    pub expect: &'static [u8],
}

/// The workloads, in the paper's order.
pub const WORKLOADS: [&str; 4] = ["hipster", "hotel", "media", "social"];

/// The eight operations of the paper's Table 3.
pub const OPERATIONS: &[Operation] = &[
    Operation {
        workload: "hipster",
        name: "get_cart",
        entry: "hipster-frontend",
        request: b"op=get_cart&user=alice&currency=EUR",
        expect: b"name=Sunglasses",
    },
    Operation {
        workload: "hipster",
        name: "place_order",
        entry: "hipster-frontend",
        request: b"op=place_order&user=bob&currency=EUR&add=OLJCESPC7Z:1,L9ECAV7KIM:2\
&email=bob@example.com&street=1600+Amphitheatre+Parkway&city=Mountain+View&zip=94043\
&country=US&card=4432801561520454&cvv=672&exp_month=1&exp_year=2030",
        expect: b"order=",
    },
    Operation {
        workload: "hotel",
        name: "search_nearby",
        entry: "hotel-frontend",
        request: b"op=search_nearby&lat=37.7867&lon=-122.4111&in=2015-04-09&out=2015-04-10",
        expect: b"name=Clift Hotel",
    },
    Operation {
        workload: "hotel",
        name: "make_reservation",
        entry: "hotel-frontend",
        request: b"op=make_reservation&user=Cornell_1&password=1111111111&hotel=12\
&in=2015-04-20&out=2015-04-21&rooms=1",
        expect: b"reservation=",
    },
    Operation {
        workload: "media",
        name: "upload_unique_id",
        entry: "media-frontend",
        request: b"op=upload_unique_id&req=1",
        expect: b"review_id=",
    },
    Operation {
        workload: "media",
        name: "read_page",
        entry: "media-frontend",
        request: b"op=read_page&movie=1&start=0&stop=4",
        expect: b"title=The Matrix",
    },
    Operation {
        workload: "social",
        name: "compose_post",
        entry: "social-frontend",
        request: b"op=compose_post&user=alice\
&text=Hello+%40bob+and+%40carol%2C+see+https%3A%2F%2Fgithub.com%2Fdelimitrou%2FDeathStarBench",
        expect: b"mentions=2&urls=1",
    },
    Operation {
        workload: "social",
        name: "follow",
        entry: "social-frontend",
        request: b"op=follow&user=alice&followee=dave",
        expect: b"follow=ok",
    },
];

/// The operation `name` of `workload`.
pub fn find(workload: &str, name: &str) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .find(|o| o.workload == workload && o.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FunctionName;

    #[test]
    fn two_operations_per_workload_with_valid_entries() {
        for w in WORKLOADS {
            let ops: alloc::vec::Vec<_> = OPERATIONS.iter().filter(|o| o.workload == w).collect();
            assert_eq!(ops.len(), 2, "{w}");
            for o in ops {
                assert!(FunctionName::new(o.entry).is_ok(), "{}", o.entry);
                assert!(o.entry.starts_with(w));
                let op = [b"op=", o.name.as_bytes(), b"&"].concat();
                assert!(o.request.starts_with(&op), "{}", o.name);
                assert!(!o.expect.is_empty());
                assert!(!o.request.contains(&b'\n'));
                assert_eq!(find(w, o.name), Some(o));
            }
        }
        assert_eq!(OPERATIONS.len(), 8);
        assert_eq!(find("hotel", "none"), None);
    }
}

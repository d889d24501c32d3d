//! pagelab's harness: host facts, profiles, micro-benchmarks (and, as it grows, the runner,
//! results store, statistics and comparisons).

pub mod host;
pub mod micro;
pub mod profiles;
pub mod run;
pub mod stats;

//! pagelab's harness: host facts, profiles, micro-benchmarks (and, as it grows, the runner,
//! results store, statistics and comparisons).

pub mod compare;
pub mod csv_text;
pub mod experiments;
pub mod host;
pub mod import;
pub mod lkp;
pub mod micro;
pub mod mmtests;
pub mod output;
pub mod owner;
pub mod profiles;
pub mod results;
pub mod run;
pub mod stats;
pub mod store;

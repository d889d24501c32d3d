//! The projector: from what the engine measured here to machines with 16 to 512 CPUs.
//!
//! - [`trace`]: what one task on the engine did to shared locks and lines, and the compute in
//!   between (captured by [`capture`], stored in a compact file);
//! - [`machine`]: machine descriptions, physical parameters only;
//! - [`memory`]: each writer's bandwidth on a loaded node, from its loaded-latency curve;
//! - [`replay`]: N virtual CPUs replaying a trace on a machine as a seeded discrete-event
//!   simulation;
//! - [`project`] and [`validate`]: rows for the results store, and the comparison with
//!   published tables, with [`claims`]: what each posting says limited its kernels, checked
//!   against the projected lock statistics.

pub mod calibrate;
pub mod capture;
pub mod claims;
mod coherence;
pub mod error;
mod event_queue;
pub mod kvcapture;
pub mod machine;
pub mod memory;
pub mod netpipe;
pub mod project;
pub mod replay;
pub mod sensitivity;
pub mod table;
pub mod trace;
pub mod validate;

pub use error::{CaptureError, MachineError, ProjectError};
pub use machine::Machine;
pub use replay::{Replay, ReplayResult, ReplaySpec};
pub use trace::{Trace, TraceMeta};

//! The data a run leaves behind, as the results store keeps it and as compare, export, import
//! and (later) the projector exchange it.
//!
//! A *run* is one invocation (a `pagelab run`, one experiment member, an import, a projection)
//! under a *label*, the name a comparison's column carries, like a kernel name in an mmtests
//! report. Its *samples* are keyed by mode, task count and metric; `repeat` numbers the
//! repetitions of the whole measurement (`--repeats`), and `seq` orders samples within one.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::owner::{Liveness, Owner};

/// Where a run's numbers come from. Compare and reports treat all alike but say which is which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Measured here, on the engine or on the host kernel.
    Measured,
    /// Computed by the projector for a machine description.
    Projected,
    /// Produced by the real tools (will-it-scale, pft) anywhere, then imported.
    Imported,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Still being written, or its writer died (killed, power lost): the samples it stored are
    /// kept, and [`StoredRun::abandoned`] tells the two apart.
    Running,
    Complete,
    /// Stopped early (Ctrl-C, a failure): what was measured is stored.
    Incomplete,
}

/// A name that is none of an enum's (an origin, a status, an import format): what kind of name,
/// the name, and the names there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`; expected {expected}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub expected: String,
}

macro_rules! str_enum {
    ($t:ty, $what:literal, $($v:ident => $s:literal),+) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),+ }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($s => Ok(Self::$v),)+
                    _ => Err(UnknownName {
                        what: $what,
                        name: s.to_string(),
                        expected: [$($s),+].join(", "),
                    }),
                }
            }
        }
    };
}

str_enum!(Origin, "origin", Measured => "measured", Projected => "projected", Imported => "imported");
str_enum!(Status, "status", Running => "running", Complete => "complete", Incomplete => "incomplete");

/// What describes a run, written once when it starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The comparison column this run belongs to (default: the profile name, or `kernel-<release>`).
    pub label: String,
    /// Workload name (`page_fault1`, `pft`, ...; imports may name others).
    pub workload: String,
    /// `engine`, `kernel`, or for imports the tool (`will-it-scale`, `pft`, `csv`).
    pub target: String,
    pub origin: Origin,
    /// Profile name, for engine and projected runs.
    pub profile: Option<String>,
    /// The profile as run: its full TOML with every key (defaults filled in).
    pub profile_toml: Option<String>,
    /// The host facts as JSON ([`crate::host::HostInfo`]) where the run was made; for imports,
    /// what the user said about the machine, if anything.
    pub host_json: Option<String>,
    /// For projected runs, the machine description's name; for imports, a free description.
    pub machine: Option<String>,
    /// The experiment this run was made for, if any.
    pub experiment: Option<String>,
    pub pagelab_version: String,
    /// The command line, for the record.
    pub command: String,
}

/// The longest label quoted whole in a message; the longest label accepted is as long.
pub const MAX_LABEL_CHARS: usize = 64;

/// A label as messages quote it: whole, in backquotes, if it could be a label; otherwise its
/// first 40 characters and its length, so that a file pasted into `--label` or a runaway shell
/// variable gets a one-line error instead of a screenful. Control characters are escaped.
pub fn quote_label(l: &str) -> String {
    let n = l.chars().count();
    if n <= MAX_LABEL_CHARS {
        return format!("`{}`", l.escape_debug());
    }
    let prefix: String = l.chars().take(40).collect();
    format!("`{}`...({n} characters)", prefix.escape_debug())
}

/// What one set of samples measures.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SampleKey {
    /// `processes` or `threads`.
    pub mode: String,
    pub tasks: u32,
    /// `faults/sec`, `faults/cpu`, ...
    pub metric: String,
    pub higher_is_better: bool,
}

/// A run as listed from the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    pub id: i64,
    pub meta: RunMeta,
    pub status: Status,
    /// RFC 3339, UTC.
    pub started: String,
    pub finished: Option<String>,
    pub nr_samples: u64,
    /// The process writing the run, recorded while it is running (none for runs stored whole,
    /// and for runs begun by a pagelab that did not record it).
    pub owner: Option<Owner>,
}

/// The status `runs` shows for a run whose process is gone; derived, never stored.
pub const ABANDONED: &str = "abandoned";

impl StoredRun {
    /// A run left `running` by a process that no longer exists (`kill -9`, a crash, a reboot):
    /// nothing will finish it. Its samples are as good as an interrupted run's. A running run
    /// without a recorded owner was begun by a pagelab from before owners were recorded; such a
    /// pagelab refuses a store of this schema, so only a process of it already measuring when
    /// the store was upgraded could still write it: it is taken as abandoned. A run whose owner
    /// ran on another host or in another pid namespace cannot be judged from here and is not
    /// abandoned.
    pub fn abandoned(&self) -> bool {
        self.status == Status::Running
            && self
                .owner
                .as_ref()
                .is_none_or(|o| o.liveness() == Liveness::Gone)
    }

    /// The status to show: the stored one, or [`ABANDONED`].
    pub fn shown_status(&self) -> &'static str {
        if self.abandoned() {
            ABANDONED
        } else {
            self.status.as_str()
        }
    }

    /// Stopped early, whether by an interrupt or by the death of its process: what it
    /// measured is there, but not all that was asked for.
    pub fn incomplete(&self) -> bool {
        self.status == Status::Incomplete || self.abandoned()
    }
}

/// One sample, with what a comparison needs to group it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    pub run_id: i64,
    pub label: String,
    pub workload: String,
    pub origin: Origin,
    pub key: SampleKey,
    pub repeat: u32,
    pub seq: u32,
    pub value: f64,
}

/// An engine counter over one measured window (lock statistics, VM events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterRow {
    pub run_id: i64,
    pub mode: String,
    pub tasks: u32,
    pub repeat: u32,
    /// `event:<name>` or `lock:<class>:acquisitions|contended|wait_ns`.
    pub name: String,
    pub value: f64,
}

/// Which runs a listing, export or deletion selects. Empty fields select everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFilter {
    pub ids: Vec<i64>,
    pub labels: Vec<String>,
    pub workload: Option<String>,
    pub origin: Option<Origin>,
    pub status: Option<Status>,
    pub experiment: Option<String>,
}

/// A whole run in memory: what an importer produces and what `Store::insert_run` stores in one
/// transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    pub meta: RunMeta,
    pub status: Status,
    /// `(key, repeat, samples in order)`.
    pub samples: Vec<(SampleKey, u32, Vec<f64>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_are_quoted_by_a_prefix() {
        assert_eq!(quote_label("linux-6.7"), "`linux-6.7`");
        assert_eq!(quote_label("a\nb"), "`a\\nb`");
        let long = "x".repeat(10_000);
        let q = quote_label(&long);
        assert_eq!(q, format!("`{}`...(10000 characters)", "x".repeat(40)));
        // Characters, not bytes: a multi-byte label is cut on a character boundary.
        let q = quote_label(&"é".repeat(100));
        assert!(q.ends_with("...(100 characters)"), "{q}");
    }

    #[test]
    fn enums_round_trip_and_reject_unknown_names() {
        for o in [Origin::Measured, Origin::Projected, Origin::Imported] {
            assert_eq!(o.as_str().parse::<Origin>().unwrap(), o);
        }
        for s in [Status::Running, Status::Complete, Status::Incomplete] {
            assert_eq!(s.to_string().parse::<Status>().unwrap(), s);
        }
        let e = "done".parse::<Status>().unwrap_err();
        assert_eq!((e.what, e.name.as_str()), ("status", "done"));
        let e = e.to_string();
        assert!(
            e.contains("unknown status `done`; expected running, complete, incomplete"),
            "{e}"
        );
    }
}

//! Experiments: a published comparison written down as data (`experiments/*.toml`), so that
//! `pagelab reproduce NAME` runs it (profiles x workload x modes x task counts x samples) and
//! prints its comparison table, and the projector can take the same description to the machine
//! the comparison was published on.
//!
//! Like profiles, the shipped experiments are embedded in the binary; a path to a user's own
//! file works too. Every key is checked when the file is read (unknown keys are errors), and
//! every profile it names must load, so a typo fails before anything runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::profiles;
use crate::run::parse_tasks;
use crate::stats::Significance;
use pagelab_workloads::kvcache::KvParams;
use pagelab_workloads::{Mode, WorkloadKind};

/// `(name, TOML text)` of every shipped experiment.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "page_fault1-lru-lock-2018",
        include_str!("../../../experiments/page_fault1-lru-lock-2018.toml"),
    ),
    (
        "pft-pvl-2023",
        include_str!("../../../experiments/pft-pvl-2023.toml"),
    ),
    (
        "pft-pvl-vma-per-thread-2023",
        include_str!("../../../experiments/pft-pvl-vma-per-thread-2023.toml"),
    ),
    (
        "pft-pvl-refcount-2025",
        include_str!("../../../experiments/pft-pvl-refcount-2025.toml"),
    ),
    (
        "pft-pvl-refcount-vma-per-thread-2025",
        include_str!("../../../experiments/pft-pvl-refcount-vma-per-thread-2025.toml"),
    ),
    (
        "page_fault3-file-vma-lock-2023",
        include_str!("../../../experiments/page_fault3-file-vma-lock-2023.toml"),
    ),
    (
        "lameter-2005",
        include_str!("../../../experiments/lameter-2005.toml"),
    ),
    (
        "netpipe-hopcpu-2016",
        include_str!("../../../experiments/netpipe-hopcpu-2016.toml"),
    ),
    (
        "mglru-bulk-2023",
        include_str!("../../../experiments/mglru-bulk-2023.toml"),
    ),
    (
        "page_fault2-entry-prefetch-2025",
        include_str!("../../../experiments/page_fault2-entry-prefetch-2025.toml"),
    ),
    (
        "page_fault2-folio-batch-2024",
        include_str!("../../../experiments/page_fault2-folio-batch-2024.toml"),
    ),
    (
        "beyond-linux-page_fault1",
        include_str!("../../../experiments/beyond-linux-page_fault1.toml"),
    ),
    (
        "beyond-linux-pft",
        include_str!("../../../experiments/beyond-linux-pft.toml"),
    ),
    (
        "beyond-linux-mapbench",
        include_str!("../../../experiments/beyond-linux-mapbench.toml"),
    ),
    (
        "beyond-linux-mapbench-shared",
        include_str!("../../../experiments/beyond-linux-mapbench-shared.toml"),
    ),
    (
        "beyond-linux-cortenmm-mmap",
        include_str!("../../../experiments/beyond-linux-cortenmm-mmap.toml"),
    ),
    (
        "beyond-linux-cortenmm-mmap-pf",
        include_str!("../../../experiments/beyond-linux-cortenmm-mmap-pf.toml"),
    ),
    (
        "beyond-linux-cortenmm-mmap-high",
        include_str!("../../../experiments/beyond-linux-cortenmm-mmap-high.toml"),
    ),
    (
        "beyond-linux-cortenmm-mmap-pf-high",
        include_str!("../../../experiments/beyond-linux-cortenmm-mmap-pf-high.toml"),
    ),
    (
        "beyond-linux-cortenmm-pf-low",
        include_str!("../../../experiments/beyond-linux-cortenmm-pf-low.toml"),
    ),
    (
        "beyond-linux-cortenmm-pf-high",
        include_str!("../../../experiments/beyond-linux-cortenmm-pf-high.toml"),
    ),
    (
        "beyond-linux-cortenmm-munmap-low",
        include_str!("../../../experiments/beyond-linux-cortenmm-munmap-low.toml"),
    ),
    (
        "beyond-linux-cortenmm-munmap-high",
        include_str!("../../../experiments/beyond-linux-cortenmm-munmap-high.toml"),
    ),
];

/// The names of the published tables that ship (`data/published/*.csv`, embedded by the
/// projector, which depends on this crate and not the reverse). An experiment's `published`
/// key must name one of them: a misspelt table would silently leave the experiment out of
/// `pagelab validate`. A test keeps the list equal to the directory.
pub const PUBLISHED_TABLES: &[&str] = &[
    "page_fault1-2018",
    "pft-single-vma-2023",
    "page_fault2-gnr-2025",
    "page_fault2-skl-2024",
];

/// The names of the shipped machine descriptions (`machines/*.toml`, embedded by the projector,
/// which depends on this crate and not the reverse). An experiment's `machine` key must name
/// one of them, so that a misspelt machine fails when the experiment is read, not minutes into
/// a run. Tests keep the list equal to the directory and to the projector's list.
pub const MACHINES: &[&str] = &[
    "broadwell-2s-44c",
    "icelake-2s-64c",
    "epyc-bergamo-2s-256c",
    "dev-host",
    "altix-3700-512p",
    "epyc-7k62-2s",
    "broadwell-2s-20c",
    "granite-rapids-2s-128c",
    "skylake-sp-2s-52c",
];

/// The file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: Option<String>,
    description: String,
    /// Where the comparison was published.
    source: String,
    workload: String,
    /// The first is the baseline column.
    profiles: Vec<String>,
    modes: Vec<String>,
    tasks: String,
    samples: usize,
    #[serde(default = "one")]
    warmup: usize,
    #[serde(default = "one")]
    repeats: usize,
    #[serde(default = "second")]
    interval_ms: u64,
    memsize: Option<String>,
    size: Option<String>,
    #[serde(default = "interval")]
    significance: String,
    /// The name of the published table this experiment corresponds to (one of
    /// [`PUBLISHED_TABLES`]), for the projector's validation.
    published: Option<String>,
    /// The machine the comparison was published on (one of [`MACHINES`]): where `reproduce`
    /// and `project` take the experiment by default.
    machine: Option<String>,
    /// kvcache's shape (the task counts give its server and client threads).
    kvcache: Option<KvcacheFile>,
}

/// An experiment's `[kvcache]` table; unset keys take the workload's defaults.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KvcacheFile {
    keys: Option<u64>,
    value_size: Option<u64>,
    memcg_percent: Option<u64>,
    connections: Option<usize>,
    pipeline: Option<usize>,
    get_ratio: Option<u32>,
}

impl KvcacheFile {
    fn params(&self) -> KvParams {
        let d = KvParams::default();
        KvParams {
            keys: self.keys.unwrap_or(d.keys),
            value_size: self.value_size.unwrap_or(d.value_size),
            memcg_percent: self.memcg_percent.unwrap_or(d.memcg_percent),
            connections: self.connections.unwrap_or(d.connections),
            pipeline: self.pipeline.unwrap_or(d.pipeline),
            get_ratio: self.get_ratio.unwrap_or(d.get_ratio),
            ..d
        }
    }
}

fn one() -> usize {
    1
}
fn second() -> u64 {
    1000
}
fn interval() -> String {
    "interval".into()
}

/// A checked experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: String,
    pub description: String,
    pub source: String,
    pub workload: WorkloadKind,
    pub profiles: Vec<profiles::Profile>,
    pub modes: Vec<Mode>,
    pub tasks: Vec<usize>,
    pub samples: usize,
    pub warmup: usize,
    pub repeats: usize,
    pub interval_ms: u64,
    pub memsize: Option<u64>,
    pub size: Option<u64>,
    pub significance: Significance,
    pub published: Option<String>,
    /// The machine the comparison was published on, a shipped machine's name (`None`: no
    /// description of it ships).
    pub machine: Option<String>,
    /// kvcache's shape, if the file sets one.
    pub kvcache: Option<KvParams>,
}

/// A significance rule name that is neither `interval` nor `ttest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown significance rule `{0}`; expected interval (current mmtests) or ttest (2018-2024)"
)]
pub struct SignificanceError(pub String);

/// Parse a significance rule name as the CLI and experiment files write it.
pub fn parse_significance(s: &str) -> Result<Significance, SignificanceError> {
    match s {
        "ttest" | "t-test" => Ok(Significance::TTest),
        "interval" => Ok(Significance::Interval),
        _ => Err(SignificanceError(s.to_string())),
    }
}

/// A byte size that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("`{text}` is not a size ({source}); write e.g. 512M or 2G")]
    NotASize {
        text: String,
        source: parse_size::Error,
    },
    #[error("a size of zero is not allowed")]
    Zero,
}

/// Parse a byte size such as `512M` or `1G`.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let v = parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|source| SizeError::NotASize {
            text: s.to_string(),
            source,
        })?;
    if v == 0 {
        return Err(SizeError::Zero);
    }
    Ok(v)
}

/// Why an experiment could not be loaded. Each message is one line and names the experiment.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(
        "unknown experiment `{0}`; shipped experiments: {names} (or give a path to a .toml file)",
        names = BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    )]
    Unknown(String),
    #[error("cannot read experiment {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not TOML, or its keys are not an experiment's.
    #[error("experiment {name}: {}", source.message().trim())]
    Syntax {
        name: String,
        source: toml::de::Error,
    },
    /// A value the file sets is refused: a profile, a mode, the task counts, a size, the rule.
    #[error("experiment {name}: {source}")]
    Invalid {
        name: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file takes a shipped experiment's name but runs something else.
    #[error(
        "experiment {} is named `{name}` like a shipped experiment but differs from it in {changed}; give it a name of its own (name = \"...\") so that its runs are not stored under the shipped name",
        path.display()
    )]
    ShippedName {
        path: PathBuf,
        name: String,
        /// The keys that differ, comma-separated.
        changed: String,
    },
}

/// Read an experiment from its TOML text; `fallback_name` names it when the file does not.
pub fn parse(text: &str, fallback_name: &str) -> Result<Experiment, ExperimentError> {
    let f: ExperimentFile = toml::from_str(text).map_err(|source| ExperimentError::Syntax {
        name: fallback_name.to_string(),
        source,
    })?;
    let name = f.name.unwrap_or_else(|| fallback_name.to_string());
    let ctx = |e: Box<dyn std::error::Error + Send + Sync>| ExperimentError::Invalid {
        name: name.clone(),
        source: e,
    };
    if f.profiles.is_empty() {
        return Err(ctx("names no profile".into()));
    }
    let profiles = f
        .profiles
        .iter()
        .map(|p| profiles::load(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ctx(e.into()))?;
    let modes = f
        .modes
        .iter()
        .map(|m| m.parse::<Mode>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ctx(e.into()))?;
    if modes.is_empty() {
        return Err(ctx("names no mode".into()));
    }
    if f.samples == 0 || f.repeats == 0 {
        return Err(ctx("samples and repeats must be at least 1".into()));
    }
    if let Some(table) = &f.published
        && !PUBLISHED_TABLES.contains(&table.as_str())
    {
        return Err(ctx(format!(
            "published = \"{table}\" names no shipped table; tables: {}",
            PUBLISHED_TABLES.join(", ")
        )
        .into()));
    }
    if let Some(m) = &f.machine
        && !MACHINES.contains(&m.as_str())
    {
        return Err(ctx(format!(
            "machine = \"{m}\" names no shipped machine; machines: {}",
            MACHINES.join(", ")
        )
        .into()));
    }
    Ok(Experiment {
        workload: f
            .workload
            .parse::<WorkloadKind>()
            .map_err(|e| ctx(e.into()))?,
        tasks: parse_tasks(&f.tasks).map_err(|e| ctx(e.into()))?,
        memsize: f
            .memsize
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(|e| ctx(e.into()))?,
        size: f
            .size
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(|e| ctx(e.into()))?,
        significance: parse_significance(&f.significance).map_err(|e| ctx(e.into()))?,
        name,
        description: f.description,
        source: f.source,
        profiles,
        modes,
        samples: f.samples,
        warmup: f.warmup,
        repeats: f.repeats,
        interval_ms: f.interval_ms.max(10),
        published: f.published,
        machine: f.machine,
        kvcache: f.kvcache.as_ref().map(KvcacheFile::params),
    })
}

/// The sets of shipped experiments (see [`set`]).
pub const SETS: &[&str] = &["beyond-linux"];

/// The set a shipped experiment belongs to, if any.
pub fn set_of(name: &str) -> Option<&'static str> {
    SETS.iter()
        .copied()
        .find(|s| name.strip_prefix(s).is_some_and(|r| r.starts_with('-')))
}

/// The shipped experiments that make up the set `name`: those named `<name>-<member>`, in the
/// order they ship, when no experiment is named `name` itself (empty otherwise). A set is one
/// comparison over several workloads (`beyond-linux`), one file per workload, so that each
/// stays an ordinary experiment that `reproduce` and `project` take alone.
pub fn set(name: &str) -> Vec<&'static str> {
    if BUILTIN.iter().any(|(n, _)| *n == name) {
        return Vec::new();
    }
    let prefix = format!("{name}-");
    BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// Load a shipped experiment by name, or a user's file by path.
pub fn load(name_or_path: &str) -> Result<Experiment, ExperimentError> {
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| ExperimentError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map_or_else(|| name_or_path.into(), |s| s.to_string_lossy().into_owned());
        let e = parse(&text, &stem)?;
        refuse_shipped_name(&e, path)?;
        return Ok(e);
    }
    match BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        Some((n, text)) => parse(text, n),
        None => Err(ExperimentError::Unknown(name_or_path.to_string())),
    }
}

/// The settings in which two experiments differ, by key; empty when they run the same thing.
fn differences(a: &Experiment, b: &Experiment) -> Vec<&'static str> {
    let profiles = |e: &Experiment| -> Vec<(String, pagelab_mm::Policy)> {
        e.profiles
            .iter()
            .map(|p| (p.name.clone(), p.policy.clone()))
            .collect()
    };
    [
        ("description", a.description == b.description),
        ("source", a.source == b.source),
        ("workload", a.workload == b.workload),
        ("profiles", profiles(a) == profiles(b)),
        ("modes", a.modes == b.modes),
        ("tasks", a.tasks == b.tasks),
        ("samples", a.samples == b.samples),
        ("warmup", a.warmup == b.warmup),
        ("repeats", a.repeats == b.repeats),
        ("interval_ms", a.interval_ms == b.interval_ms),
        ("memsize", a.memsize == b.memsize),
        ("size", a.size == b.size),
        ("significance", a.significance == b.significance),
        ("published", a.published == b.published),
        ("machine", a.machine == b.machine),
        ("kvcache", a.kvcache == b.kvcache),
    ]
    .into_iter()
    .filter_map(|(key, same)| (!same).then_some(key))
    .collect()
}

/// A file given by path may not take a shipped experiment's name unless it runs the same
/// thing: its runs are stored under the experiment's name, and `compare --experiment` and the
/// report would pool a changed copy's rows with the shipped experiment's. The comparison is on
/// parsed values, so a copy that only reformats the file loads.
fn refuse_shipped_name(e: &Experiment, path: &Path) -> Result<(), ExperimentError> {
    let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == e.name) else {
        return Ok(());
    };
    let shipped = parse(text, name)?;
    let changed = differences(&shipped, e);
    if changed.is_empty() {
        return Ok(());
    }
    Err(ExperimentError::ShippedName {
        path: path.to_path_buf(),
        name: name.to_string(),
        changed: changed.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_experiment_loads_and_is_named_after_its_file() {
        for (name, _) in BUILTIN {
            let e = load(name).unwrap();
            assert_eq!(&e.name, name);
            assert!(e.profiles.len() >= 2, "{name} compares nothing");
        }
        let e = load("pft-pvl-2023").unwrap();
        assert_eq!(e.workload, WorkloadKind::Pft);
        assert_eq!(e.significance, Significance::TTest);
        assert_eq!(e.profiles[0].name, "mm-unstable-20230210");
    }

    #[test]
    fn shipped_list_matches_the_directory() {
        crate::profiles::assert_embedded_match_dir("experiments", BUILTIN);
    }

    #[test]
    fn bad_files_are_one_line_errors_naming_the_problem() {
        let base = "description = \"d\"\nsource = \"s\"\nworkload = \"pft\"\nmodes = [\"threads\"]\ntasks = \"1\"\nsamples = 2\n";
        let ok = format!("{base}profiles = [\"linux-4.15\"]\n");
        assert!(parse(&ok, "x").is_ok());
        let cases = [
            (
                format!("{base}profiles = [\"linux-9\"]\n"),
                "unknown profile",
            ),
            (format!("{base}profiles = []\n"), "names no profile"),
            (format!("{ok}colour = 1\n"), "unknown field"),
            (ok.replace("pft", "pfx"), "unknown workload"),
            (ok.replace("\"1\"", "\"0\""), "not a positive"),
            (ok.replace("threads", "fibres"), "unknown mode"),
            (format!("{ok}significance = \"maybe\"\n"), "significance"),
            (format!("{ok}size = \"lots\"\n"), "not a size"),
        ];
        for (text, want) in cases {
            let e = parse(&text, "x").unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{want}: {e}");
        }
        let e = load("nope").unwrap_err();
        assert!(
            matches!(&e, ExperimentError::Unknown(n) if n == "nope"),
            "{e:?}"
        );
        assert!(e.to_string().contains("pft-pvl-2023"));
    }

    #[test]
    fn published_tables_are_the_shipped_ones() {
        let dir = format!("{}/../../data/published", env!("CARGO_MANIFEST_DIR"));
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                (p.extension()? == "csv")
                    .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
            })
            .collect();
        on_disk.sort();
        let mut listed: Vec<&str> = PUBLISHED_TABLES.to_vec();
        listed.sort();
        assert_eq!(
            on_disk, listed,
            "data/published/ and PUBLISHED_TABLES differ"
        );
    }

    #[test]
    fn machines_are_the_shipped_ones() {
        let on_disk = crate::profiles::toml_stems("machines");
        let mut listed: Vec<&str> = MACHINES.to_vec();
        listed.sort();
        assert_eq!(on_disk, listed, "machines/ and MACHINES differ");
    }

    /// The published comparisons name the machine they ran on; the ones without a shipped
    /// machine name none.
    #[test]
    fn shipped_experiments_name_their_machine() {
        for (name, machine) in [
            ("page_fault1-lru-lock-2018", Some("broadwell-2s-44c")),
            ("pft-pvl-2023", Some("icelake-2s-64c")),
            ("pft-pvl-vma-per-thread-2023", Some("icelake-2s-64c")),
            ("lameter-2005", Some("altix-3700-512p")),
            ("pft-pvl-refcount-2025", Some("icelake-2s-64c")),
            (
                "pft-pvl-refcount-vma-per-thread-2025",
                Some("icelake-2s-64c"),
            ),
            ("page_fault3-file-vma-lock-2023", Some("icelake-2s-64c")),
            ("mglru-bulk-2023", Some("epyc-7k62-2s")),
            ("netpipe-hopcpu-2016", Some("broadwell-2s-20c")),
            (
                "page_fault2-entry-prefetch-2025",
                Some("granite-rapids-2s-128c"),
            ),
            ("page_fault2-folio-batch-2024", Some("skylake-sp-2s-52c")),
        ] {
            assert_eq!(load(name).unwrap().machine.as_deref(), machine, "{name}");
        }
    }

    #[test]
    fn an_experiment_naming_a_missing_machine_is_refused() {
        let text = BUILTIN
            .iter()
            .find(|(n, _)| *n == "pft-pvl-2023")
            .unwrap()
            .1;
        let bad = text.replace(
            "machine = \"icelake-2s-64c\"",
            "machine = \"icelake-2s-46c\"",
        );
        assert_ne!(bad, text);
        let e = parse(&bad, "x").unwrap_err();
        assert!(matches!(e, ExperimentError::Invalid { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with(
                "experiment pft-pvl-2023: machine = \"icelake-2s-46c\" names no shipped machine"
            ) && e.contains("broadwell-2s-44c")
                && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn an_experiment_naming_a_missing_table_is_refused() {
        let text = BUILTIN
            .iter()
            .find(|(n, _)| *n == "pft-pvl-2023")
            .unwrap()
            .1;
        let bad = text.replace("pft-single-vma-2023", "pft-single-vma-2032");
        let e = parse(&bad, "x").unwrap_err().to_string();
        assert!(
            e.contains("published = \"pft-single-vma-2032\" names no shipped table")
                && e.contains("page_fault1-2018")
                && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn a_changed_copy_named_like_a_shipped_experiment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let text = BUILTIN
            .iter()
            .find(|(n, _)| *n == "lameter-2005")
            .unwrap()
            .1;
        // A copy by file stem with the same content, reformatted, loads.
        let same = dir.path().join("lameter-2005.toml");
        std::fs::write(&same, format!("# my copy\n{text}\n")).unwrap();
        assert_eq!(load(same.to_str().unwrap()).unwrap().name, "lameter-2005");
        // One setting changed: refused, naming it.
        let samples = text
            .lines()
            .find(|l| l.starts_with("samples"))
            .expect("lameter-2005 sets samples");
        std::fs::write(&same, text.replace(samples, "samples = 99")).unwrap();
        let e = load(same.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("named `lameter-2005` like a shipped experiment")
                && e.contains("differs from it in samples")
                && !e.contains('\n'),
            "{e}"
        );
        // The file's stem alone collides just the same.
        let unnamed = text
            .replace("name = \"lameter-2005\"\n", "")
            .replace(samples, "samples = 99");
        std::fs::write(&same, &unnamed).unwrap();
        assert!(
            load(same.to_str().unwrap())
                .unwrap_err()
                .to_string()
                .contains("samples")
        );
        // The same change under a name of its own loads.
        let own = dir.path().join("mine.toml");
        std::fs::write(&own, &unnamed).unwrap();
        assert_eq!(load(own.to_str().unwrap()).unwrap().name, "mine");
    }
}

//! `pagelab import`: turning what the real tools printed into a [`RunData`] the store keeps next
//! to pagelab's own runs (origin [`Origin::Imported`]).
//!
//! Four formats, each parsed as the tool prints it (the test fixtures under
//! `crates/bench/tests/data/` were captured from the real programs):
//!
//! * [`Format::WillItScale`]: the stdout of one will-it-scale binary
//!   (`./page_fault1_processes -t 2 -s 5`). It prints `testcase:<description>`, `warmup`, one
//!   `min:<n> max:<n> total:<n>` line a second, where `total` is what all tasks did in that second,
//!   `measurement` after the sixth of them, and `average:<n>` (the mean of the totals after
//!   `measurement`, rounded down) once `-s` seconds have been measured. The samples are the
//!   `total`s after `measurement`, the ones will-it-scale averages itself; without the marker
//!   (output cut short) the first [`ImportOptions::warmup`] totals are dropped instead. Every
//!   `testcase:` line starts a new repetition, so runs appended to one file import as repeats
//!   0, 1, ... A file with a run that has no `average:` (interrupted) imports as
//!   [`Status::Incomplete`]. The output names neither the binary nor `-t`, so the mode and the
//!   task count come from the options (or, through [`parse_named`], the file name); the workload
//!   comes from the options, else from the testcase description for `page_fault1`..`page_fault4`,
//!   else from the file name. The page-fault tests count one per page touched, so their metric is
//!   `faults/sec`; other tests count operations (`ops/sec`).
//! * [`Format::WillItScaleCsv`]: the CSV `runtest.py <testcase>` prints,
//!   `tasks,processes,processes_idle,threads,threads_idle,linear`, one row per task count whose
//!   `processes` and `threads` cells are the `average:` of a 5-second run of each binary. Each
//!   cell is one sample of that mode at that task count; the `0,0,100,0,100,0` row runtest.py
//!   starts with, and cells of `-1` (a run that printed no average) or `0`, are skipped; every
//!   cell, taken or not, must be what runtest.py prints (see the checks below). The
//!   workload comes from the options, else the file name (runtest.py's output is conventionally
//!   saved as `<testcase>.csv`; see [`parse_named`]). A repeated header line starts the next
//!   repetition.
//! * [`Format::Pft`]: the result lines of pft, the page fault test mmtests runs (`pft -m <size>
//!   -t <n>`, or `-n <n>` for processes, appended once per iteration to `pft-<n>.log`):
//!   ` Gb Thr CLine User System Wall flt/cpu/s fault/wsec`, the times suffixed `s`, optionally
//!   under that header line (`-T`) and a `TAG pft:...` line. Older pft builds print a `Rep` column
//!   after `Gb`: a header that says so is followed, and an unlabelled 9-field row is read that
//!   way. Each row is one repetition: `flt/cpu/s` becomes a `faults/cpu` sample and `fault/wsec`
//!   a `faults/sec` sample, both higher-is-better, at task count `Thr` (the count pft actually
//!   ran, after clipping to the CPUs allowed). Lines that do not start like a number (a digit,
//!   sign or point) are pft's diagnostics (it writes them to stderr, which mmtests captures with
//!   `2>&1`) and are skipped; a line that starts like a number must be a whole result row. pft does not say whether it ran
//!   threads or processes: the mode is the options' (or the file name's), else `threads`, its
//!   default. The workload is `pft`.
//! * [`Format::Csv`]: pagelab's own plain CSV, for numbers from anywhere: a header naming `tasks`
//!   and `value` and optionally `mode` (default: the options' mode, else `threads`), `metric`
//!   (default `faults/sec`), `higher_is_better` (`true`/`false`, default `true`), `repeat`
//!   (default 0) and `workload` (else the options', else an error). Each row is one sample;
//!   empty optional cells take the default, `#` starts a comment line. What `pagelab export`
//!   writes imports as is: its `run_id`, `label`, `origin` and `seq` columns are ignored, and the
//!   `'` it puts before a cell starting with a formula character is removed
//!   ([`crate::csv_text`]).
//!
//! Nothing is written while parsing: a file either parses whole or gives an [`ImportError`]
//! naming the file, the 1-based line and what was expected there. No input makes the parsers
//! panic.
//!
//! A wrong number must never be stored, so every line is checked whole, not merely parsed:
//!
//! * A file whose last line has no newline was cut while it was written (the tools end every
//!   line they print with one), and a number cut short still reads as a number (`166141.469` cut
//!   to `1661`). When that last line is a data line of the format, the file is refused, naming
//!   the line.
//! * Numbers must look the way the tool prints them: will-it-scale's and runtest.py's counts are
//!   plain digits (`%llu`, `%d`), runtest.py's idle percentages have two decimals (`%0.2f`),
//!   pft's times two decimals and an `s` (`%8.2fs`) and its rates three decimals (`%10.3f`).
//!   A number cut to a prefix, or a unit cut off, no longer matches.
//! * What the tool prints twice is checked against itself: will-it-scale's `total` lies between
//!   the task count times `min` and times `max`, and `average:` is the mean of the measured
//!   totals; runtest.py's `linear` is the task count times the better 1-task average; pft's two
//!   rates divide one fault count by the CPU time (`User + System`) and by `Wall`, so
//!   `flt/cpu/s x (User + System)` and `fault/wsec x Wall` must agree within the rounding of
//!   the printed times.
//! * A UTF-8 byte-order mark (which some Windows editors and PowerShell's `Out-File` put at the
//!   start of a file) is skipped, for [`detect`] and for parsing.
//!
//! [`read_input`] reads at most [`MAX_INPUT_BYTES`], so an endless stream ends in an error rather
//! than in exhausted memory.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::str::FromStr;

use crate::results::{Origin, RunData, RunMeta, SampleKey, Status, UnknownName};

/// Why a file could not be imported. Every message is one line that names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A line the format does not allow.
    #[error("{file}:{line}: {msg}")]
    Line {
        file: String,
        line: usize,
        msg: String,
    },
    /// Something the file does not say and the options must (`--tasks`, `--mode`,
    /// `--workload`), or an option the file contradicts.
    #[error("{file}: {msg}")]
    File { file: String, msg: String },
    /// The file parsed but holds no sample.
    #[error("no samples found in {file} ({why})")]
    NoSamples { file: String, why: String },
    /// [`detect`] could not tell the format.
    #[error(
        "cannot tell the format of {file}: {why}; give --format \
         (will-it-scale, will-it-scale-csv, pft or csv)"
    )]
    UnknownFormat { file: String, why: String },
}

/// The most [`read_input`] reads: 256 MiB. Real captures are far smaller (will-it-scale prints
/// one short line a second, pft one line a run, runtest.py one line a task count), so an input
/// this large is the wrong file or a stream that never ends (`/dev/zero`, a pipe left open);
/// stopping there keeps memory bounded instead of reading until the machine runs out.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads a whole input to import, `name` being what errors call it: at most
/// [`MAX_INPUT_BYTES`] (one byte more is read to tell a file of exactly the limit from a longer
/// one), valid UTF-8, with a leading byte-order mark removed.
pub fn read_input(name: &str, r: impl Read) -> Result<String, ImportError> {
    let file_err = |msg: String| ImportError::File {
        file: name.to_string(),
        msg,
    };
    let mut bytes = Vec::new();
    r.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| file_err(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(file_err(format!(
            "larger than the import limit of {} MiB: not a benchmark's output, or a stream \
             that does not end",
            MAX_INPUT_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        file_err(format!(
            "not a text file (not valid UTF-8 at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok(match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// The UTF-8 byte-order mark.
const BOM: char = '\u{feff}';

/// `text` without a leading byte-order mark, which would otherwise glue itself to the first
/// CSV column's name or the first line's first word.
fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

impl ImportError {
    /// The 1-based line the error is about, if it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ImportError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// The formats [`parse`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The stdout of a will-it-scale binary.
    WillItScale,
    /// The CSV will-it-scale's `runtest.py` prints.
    WillItScaleCsv,
    /// pft's result lines, as mmtests logs them.
    Pft,
    /// pagelab's plain sample CSV.
    Csv,
}

impl Format {
    pub const ALL: [Format; 4] = [
        Format::WillItScale,
        Format::WillItScaleCsv,
        Format::Pft,
        Format::Csv,
    ];

    /// The name `--format` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::WillItScale => "will-it-scale",
            Format::WillItScaleCsv => "will-it-scale-csv",
            Format::Pft => "pft",
            Format::Csv => "csv",
        }
    }

    /// The tool the numbers come from, as [`RunMeta::target`] records it.
    pub fn tool(self) -> &'static str {
        match self {
            Format::WillItScale | Format::WillItScaleCsv => "will-it-scale",
            Format::Pft => "pft",
            Format::Csv => "csv",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "import format",
                name: s.to_string(),
                expected: Format::ALL.map(Format::as_str).join(", "),
            })
    }
}

/// What the user says about an imported file, filling in what the file itself does not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportOptions {
    pub label: String,
    /// Overrides the workload the file implies (required where it implies none).
    pub workload: Option<String>,
    /// `processes` or `threads`: required for will-it-scale output; restricts a runtest.py CSV
    /// to that column; the default for pft and the plain CSV.
    pub mode: Option<String>,
    /// The task count of a will-it-scale output (its `-t`); unused by the other formats, whose
    /// files say it.
    pub tasks: Option<u32>,
    /// Will-it-scale per-second totals to drop from a run that has no `measurement` marker.
    pub warmup: usize,
    pub machine: Option<String>,
    /// The command line, for the record.
    pub command: String,
}

/// What a file name suggests, for [`parse_named`]: will-it-scale binaries are named
/// `<test>_processes` / `<test>_threads` and people name their captures after them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameHints {
    /// `page_fault2` from `.../page_fault2_threads-t4.txt` or `wis-page_fault2-t4.txt`.
    pub workload: Option<String>,
    /// `processes` or `threads` if the name contains exactly one of those words.
    pub mode: Option<String>,
    /// `4` from a `t4` part of the name (split at `-`, `_`, `.` and spaces).
    pub tasks: Option<u32>,
}

/// Reads [`NameHints`] from a file name (a path is fine: only its last component counts).
pub fn name_hints(name: &str) -> NameHints {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let mode = match (base.contains("processes"), base.contains("threads")) {
        (true, false) => Some("processes".to_string()),
        (false, true) => Some("threads".to_string()),
        _ => None,
    };
    let tasks = base
        .split(['-', '_', '.', ' '])
        .filter_map(|p| p.strip_prefix('t'))
        .find(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u32>().ok())
        .filter(|&t| t > 0);
    let workload = binary_test_name(base).or_else(|| page_fault_name(base));
    NameHints {
        workload,
        mode,
        tasks,
    }
}

/// `<test>` of a `<test>_processes` / `<test>_threads` binary name inside `base`.
fn binary_test_name(base: &str) -> Option<String> {
    let cut = ["_processes", "_threads"]
        .iter()
        .filter_map(|s| base.find(s))
        .min()?;
    let prefix = &base[..cut];
    let start = prefix.rfind(['-', '.', ' ']).map_or(0, |i| i + 1);
    let test = &prefix[start..];
    is_identifier(test).then(|| test.to_string())
}

/// `page_faultN` anywhere in `base`.
fn page_fault_name(base: &str) -> Option<String> {
    let at = base.find("page_fault")?;
    let rest = &base[at + "page_fault".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!digits.is_empty()).then(|| format!("page_fault{digits}"))
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Guesses the format of `text` from its content; `name` (the file's) goes into the error. Fails
/// on a file that looks like none of them.
pub fn detect(name: &str, text: &str) -> Result<Format, ImportError> {
    let unknown = |why: &str| ImportError::UnknownFormat {
        file: name.to_string(),
        why: why.to_string(),
    };
    let text = strip_bom(text);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(first) = lines.clone().find(|l| !l.starts_with('#')) else {
        return Err(unknown("it is empty"));
    };
    let mut csv_like = false;
    if first.contains(',') {
        let cols: Vec<String> = first
            .split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect();
        let has = |c: &str| cols.iter().any(|x| x == c);
        if has("tasks") && has("value") {
            return Ok(Format::Csv);
        }
        if has("tasks") && (has("processes") || has("threads")) {
            return Ok(Format::WillItScaleCsv);
        }
        csv_like = true;
    }
    if lines.any(|l| {
        l.starts_with("testcase:")
            || l == "warmup"
            || l == "measurement"
            || l.strip_prefix("average:").is_some_and(is_uint)
            || parse_wis_totals(l).is_ok()
    }) {
        return Ok(Format::WillItScale);
    }
    let pft_line = |l: &str| {
        l.starts_with("TAG pft:")
            || is_pft_header(l)
            || (is_pft_row(l) && parse_pft_fields(l, None).is_ok())
    };
    if text.lines().map(str::trim).any(pft_line) {
        return Ok(Format::Pft);
    }
    Err(unknown(if csv_like {
        "its first line looks like a CSV header but has neither `tasks,value` (pagelab's CSV) \
         nor `tasks,processes,...,threads` (runtest.py's)"
    } else {
        "it has no will-it-scale line (`testcase:`, `min:<n> max:<n> total:<n>`), no pft result \
         row (`Gb Thr CLine User System Wall flt/cpu/s fault/wsec`) and no CSV header"
    }))
}

/// Parses `text` in `format`. Errors name the file `<input>`; [`parse_named`] names it.
pub fn parse(format: Format, text: &str, opts: &ImportOptions) -> Result<RunData, ImportError> {
    parse_with(format, "<input>", text, opts, &NameHints::default())
}

/// Like [`parse`], for a file called `name`: errors name it, and what the options leave unset
/// is taken from [`name_hints`]: the will-it-scale workload (after the testcase description),
/// mode and task count, runtest.py's testcase (`page_fault1.csv`: a name that is a test name
/// ending in a digit, as will-it-scale's are, before `.csv`), pft's mode, the plain CSV's
/// workload.
pub fn parse_named(
    format: Format,
    name: &str,
    text: &str,
    opts: &ImportOptions,
) -> Result<RunData, ImportError> {
    let mut hints = name_hints(name);
    if format == Format::WillItScaleCsv && hints.workload.is_none() {
        let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
        hints.workload = base
            .strip_suffix(".csv")
            .filter(|s| is_identifier(s) && s.ends_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string);
    }
    parse_with(format, name, text, opts, &hints)
}

fn parse_with(
    format: Format,
    file: &str,
    text: &str,
    opts: &ImportOptions,
    hints: &NameHints,
) -> Result<RunData, ImportError> {
    let src = Src { file };
    let text = strip_bom(text);
    if text.trim().is_empty() {
        return Err(src.no_samples("the file is empty"));
    }
    if let Some(w) = &opts.workload
        && w.trim().is_empty()
    {
        return Err(src.file_err("the workload given is empty".into()));
    }
    if let Some(m) = &opts.mode {
        check_mode(m).map_err(|msg| src.file_err(format!("{msg} (given as the mode)")))?;
    }
    check_last_line(&src, format, text)?;
    match format {
        Format::WillItScale => parse_wis(&src, text, opts, hints),
        Format::WillItScaleCsv => parse_wis_csv(&src, text, opts, hints),
        Format::Pft => parse_pft(&src, text, opts, hints),
        Format::Csv => parse_csv(&src, text, opts, hints),
    }
}

/// Refuses a file whose last line is a data line without a newline after it: the tools end
/// every line they print with one, so a missing newline means the file was cut while it was
/// being written (a copy stopped, a disk filled, `tee` killed), and a number cut short still
/// reads as a number. Which lines are data depends on the format: every will-it-scale line
/// (a cut `testcase:` description or `total:` alike), every CSV row that is not a comment, and
/// pft's result rows and header (its diagnostics are not data).
fn check_last_line(src: &Src<'_>, format: Format, text: &str) -> Result<(), ImportError> {
    if text.ends_with('\n') {
        return Ok(());
    }
    let Some(last) = text.lines().last() else {
        return Ok(());
    };
    let l = last.trim();
    let data = match format {
        Format::WillItScale => !l.is_empty(),
        Format::WillItScaleCsv | Format::Csv => !l.is_empty() && !l.starts_with('#'),
        Format::Pft => is_pft_row(l) || is_pft_header(l),
    };
    if !data {
        return Ok(());
    }
    Err(src.line_err(
        text.lines().count(),
        format!(
            "the file ends inside this line ({}, with no newline after it): it looks cut \
             short, and a number cut short still reads as a number; if the line is whole, end \
             it with a newline",
            quote(l)
        ),
    ))
}

/// The file being parsed, for messages.
struct Src<'a> {
    file: &'a str,
}

impl Src<'_> {
    fn line_err(&self, line: usize, msg: String) -> ImportError {
        ImportError::Line {
            file: self.file.to_string(),
            line,
            msg,
        }
    }

    fn file_err(&self, msg: String) -> ImportError {
        ImportError::File {
            file: self.file.to_string(),
            msg,
        }
    }

    fn no_samples(&self, why: &str) -> ImportError {
        ImportError::NoSamples {
            file: self.file.to_string(),
            why: why.to_string(),
        }
    }

    fn csv_err(&self, e: &csv::Error) -> ImportError {
        let line = e.position().map_or(0, |p| p.line() as usize);
        let msg = match e.kind() {
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            } => format!("expected {expected_len} fields like the header, found {len}"),
            csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
            _ => e.to_string(),
        };
        if line == 0 {
            self.file_err(msg)
        } else {
            self.line_err(line, msg)
        }
    }
}

/// A piece of the input quoted for a message: on one line, at most 60 characters.
fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(60).collect();
    if q.len() < s.len() {
        q.push('…');
    }
    format!("{q:?}")
}

fn is_uint(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A count as the tools print it (`%llu`, `%d`): digits only. Rust's own parser would also take
/// a leading `+`, which no tool prints.
fn parse_uint(s: &str) -> Option<u64> {
    if is_uint(s) { s.parse().ok() } else { None }
}

/// A signed count as `%d` prints it: an optional `-`, then digits.
fn parse_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if is_uint(digits) {
        s.parse().ok()
    } else {
        None
    }
}

/// Whether `s` is digits, a point and exactly `decimals` digits, as C's `%.<decimals>f` prints
/// a non-negative number: a number cut inside its decimals no longer matches.
fn is_fixed(s: &str, decimals: usize) -> bool {
    s.split_once('.')
        .is_some_and(|(int, frac)| is_uint(int) && is_uint(frac) && frac.len() == decimals)
}

fn check_mode(m: &str) -> Result<(), String> {
    match m {
        "processes" | "threads" => Ok(()),
        _ => Err(format!(
            "mode {} is neither `processes` nor `threads`",
            quote(m)
        )),
    }
}

fn meta(tool: &str, workload: String, opts: &ImportOptions) -> RunMeta {
    RunMeta {
        label: opts.label.clone(),
        workload,
        target: tool.to_string(),
        origin: Origin::Imported,
        profile: None,
        profile_toml: None,
        host_json: None,
        machine: opts.machine.clone(),
        experiment: None,
        pagelab_version: env!("CARGO_PKG_VERSION").to_string(),
        command: opts.command.clone(),
    }
}

type Samples = BTreeMap<(SampleKey, u32), Vec<f64>>;

fn into_samples(s: Samples) -> Vec<(SampleKey, u32, Vec<f64>)> {
    s.into_iter().map(|((k, r), v)| (k, r, v)).collect()
}

fn key(mode: &str, tasks: u32, metric: &str, higher_is_better: bool) -> SampleKey {
    SampleKey {
        mode: mode.to_string(),
        tasks,
        metric: metric.to_string(),
        higher_is_better,
    }
}

// ---------------------------------------------------------------------------------------------
// will-it-scale stdout

/// The testcase descriptions of will-it-scale's page-fault tests, by test name.
const WIS_DESCRIPTIONS: [(&str, &str); 4] = [
    ("page_fault1", "Anonymous memory page fault"),
    ("page_fault2", "Separate file private mapping page fault"),
    ("page_fault3", "Separate file shared mapping page fault"),
    (
        "page_fault4",
        "Separate file private mapping page read fault",
    ),
];

/// `(min, max, total)` of a `min:<n> max:<n> total:<n>` line.
fn parse_wis_totals(l: &str) -> Result<(u64, u64, u64), String> {
    let mut parts = l.split_whitespace();
    let mut field = |name: &str| -> Result<u64, String> {
        let p = parts.next().unwrap_or("");
        let v = p
            .strip_prefix(name)
            .and_then(|v| v.strip_prefix(':'))
            .ok_or_else(|| format!("expected `{name}:<n>`, found {}", quote(p)))?;
        parse_uint(v).ok_or_else(|| {
            format!(
                "expected a whole number after `{name}:`, found {}",
                quote(v)
            )
        })
    };
    let min = field("min")?;
    let max = field("max")?;
    let total = field("total")?;
    if let Some(extra) = parts.next() {
        return Err(format!(
            "expected the line to end after `total:<n>`, found {}",
            quote(extra)
        ));
    }
    Ok((min, max, total))
}

#[derive(Default)]
struct WisRun {
    description: Option<String>,
    warmup_seen: bool,
    /// `(line, min, max, total)`.
    totals: Vec<(usize, u64, u64, u64)>,
    /// Index into `totals` where `measurement` was printed.
    measurement: Option<usize>,
    /// `(line, average)`.
    average: Option<(usize, u64)>,
}

impl WisRun {
    fn is_empty(&self) -> bool {
        self.description.is_none()
            && !self.warmup_seen
            && self.totals.is_empty()
            && self.measurement.is_none()
            && self.average.is_none()
    }
}

const WIS_EXPECTED: &str = "expected a will-it-scale line (`testcase:<description>`, `warmup`, \
                            `min:<n> max:<n> total:<n>`, `measurement` or `average:<n>`)";

fn parse_wis(
    src: &Src<'_>,
    text: &str,
    opts: &ImportOptions,
    hints: &NameHints,
) -> Result<RunData, ImportError> {
    let mut runs: Vec<WisRun> = Vec::new();
    let mut cur = WisRun::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(desc) = l.strip_prefix("testcase:") {
            let desc = desc.trim().to_string();
            if let Some(prev) = runs
                .iter()
                .chain([&cur])
                .find_map(|r| r.description.as_ref())
                && *prev != desc
            {
                return Err(src.line_err(
                    n,
                    format!(
                        "testcase {} differs from the earlier {}: import each testcase from \
                         its own file",
                        quote(&desc),
                        quote(prev)
                    ),
                ));
            }
            if !cur.is_empty() {
                runs.push(std::mem::take(&mut cur));
            }
            cur.description = Some(desc);
        } else if l == "warmup" {
            if cur.warmup_seen || !cur.totals.is_empty() || cur.average.is_some() {
                return Err(src.line_err(
                    n,
                    "`warmup` in the middle of a run: expected it right after `testcase:`".into(),
                ));
            }
            cur.warmup_seen = true;
        } else if l == "measurement" {
            if cur.measurement.is_some() || cur.average.is_some() {
                return Err(src.line_err(n, "a second `measurement` in one run".into()));
            }
            cur.measurement = Some(cur.totals.len());
        } else if let Some(v) = l.strip_prefix("average:") {
            if cur.average.is_some() {
                return Err(src.line_err(n, "a second `average:` in one run".into()));
            }
            let v = parse_uint(v.trim()).ok_or_else(|| {
                src.line_err(
                    n,
                    format!(
                        "expected a whole number after `average:`, found {}",
                        quote(v)
                    ),
                )
            })?;
            cur.average = Some((n, v));
        } else if l.starts_with("min:") {
            if cur.average.is_some() {
                return Err(src.line_err(
                    n,
                    "a per-second line after `average:`: expected `testcase:` to start the next \
                     run"
                    .into(),
                ));
            }
            let (min, max, total) = parse_wis_totals(l).map_err(|m| src.line_err(n, m))?;
            if min > max || max > total {
                return Err(src.line_err(
                    n,
                    format!(
                        "expected min <= max <= total, found min:{min} max:{max} total:{total}"
                    ),
                ));
            }
            cur.totals.push((n, min, max, total));
        } else {
            return Err(src.line_err(n, format!("{WIS_EXPECTED}, found {}", quote(l))));
        }
    }
    if !cur.is_empty() {
        runs.push(cur);
    }

    // Each run's samples, checked against its own average.
    let mut measured: Vec<Vec<(usize, u64, u64, u64)>> = Vec::new();
    for run in &runs {
        let taken: Vec<_> = match run.measurement {
            Some(m) => run.totals[m..].to_vec(),
            None => run.totals.iter().skip(opts.warmup).copied().collect(),
        };
        if let (Some((line, avg)), Some(_)) = (run.average, run.measurement) {
            if taken.is_empty() {
                return Err(src.line_err(
                    line,
                    "`average:` with no per-second line after `measurement`".into(),
                ));
            }
            let sum: u128 = taken.iter().map(|t| u128::from(t.3)).sum();
            let mean = sum / taken.len() as u128;
            if mean != u128::from(avg) {
                return Err(src.line_err(
                    line,
                    format!(
                        "average:{avg} is not the mean of the {} totals after `measurement` \
                         ({mean}): the output is damaged or edited",
                        taken.len()
                    ),
                ));
            }
        }
        if !taken.is_empty() {
            measured.push(taken);
        }
    }
    if measured.is_empty() {
        let why = if runs.iter().any(|r| r.measurement.is_some()) {
            "no `min:<n> max:<n> total:<n>` line after `measurement`"
        } else if runs.iter().any(|r| !r.totals.is_empty()) {
            "no `measurement` marker, and the warm-up to skip takes every per-second line"
        } else {
            "no `min:<n> max:<n> total:<n>` line"
        };
        return Err(src.no_samples(why));
    }

    let description = runs.iter().find_map(|r| r.description.clone());
    let workload = opts
        .workload
        .clone()
        .or_else(|| {
            let d = description.as_deref()?;
            WIS_DESCRIPTIONS
                .iter()
                .find(|(_, desc)| *desc == d)
                .map(|(name, _)| name.to_string())
        })
        .or_else(|| hints.workload.clone())
        .ok_or_else(|| {
            src.file_err(format!(
                "will-it-scale's output does not name its test (testcase {}); give --workload \
                 (the binary's name without _processes/_threads)",
                description.as_deref().map_or("unknown".to_string(), quote)
            ))
        })?;
    let mode = opts
        .mode
        .clone()
        .or_else(|| hints.mode.clone())
        .ok_or_else(|| {
            src.file_err(
                "will-it-scale's output does not say which binary ran; give --mode processes \
             (for <test>_processes) or --mode threads (for <test>_threads)"
                    .into(),
            )
        })?;
    check_mode(&mode).map_err(|m| src.file_err(m))?;
    let tasks = opts.tasks.or(hints.tasks).ok_or_else(|| {
        src.file_err(
            "will-it-scale's output does not say how many tasks ran; give --tasks (its -t)".into(),
        )
    })?;
    if tasks == 0 {
        return Err(src.file_err("the task count must be at least 1".into()));
    }
    // Each total sums one count per task, so it lies between tasks x min and tasks x max.
    let t = u128::from(tasks);
    for &(line, min, max, total) in runs.iter().flat_map(|r| &r.totals) {
        let total = u128::from(total);
        if total < t * u128::from(min) || total > t * u128::from(max) {
            return Err(src.line_err(
                line,
                format!(
                    "total:{total} cannot be the sum of {tasks} tasks' counts between \
                     min:{min} and max:{max}: is the task count ({tasks}) right?"
                ),
            ));
        }
    }

    let metric = if workload.starts_with("page_fault") {
        "faults/sec"
    } else {
        "ops/sec"
    };
    let k = key(&mode, tasks, metric, true);
    let samples = measured
        .into_iter()
        .enumerate()
        .map(|(r, v)| (k.clone(), r as u32, v.iter().map(|t| t.3 as f64).collect()))
        .collect();
    let complete = runs.iter().all(|r| r.average.is_some());
    Ok(RunData {
        meta: meta(Format::WillItScale.tool(), workload, opts),
        status: if complete {
            Status::Complete
        } else {
            Status::Incomplete
        },
        samples,
    })
}

// ---------------------------------------------------------------------------------------------
// runtest.py CSV

fn csv_reader(text: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .flexible(false)
        .from_reader(text.as_bytes())
}

/// Column positions of a CSV header, with the header's line.
fn csv_header(
    src: &Src<'_>,
    rdr: &mut csv::Reader<&[u8]>,
) -> Result<(csv::StringRecord, usize), ImportError> {
    let h = rdr.headers().map_err(|e| src.csv_err(&e))?.clone();
    let line = h.position().map_or(1, |p| p.line() as usize);
    let mut seen: Vec<&str> = Vec::new();
    for c in h.iter() {
        if seen.contains(&c) {
            return Err(src.line_err(line, format!("column {} appears twice", quote(c))));
        }
        seen.push(c);
    }
    Ok((h, line))
}

fn record_line(r: &csv::StringRecord) -> usize {
    r.position().map_or(0, |p| p.line() as usize)
}

fn parse_wis_csv(
    src: &Src<'_>,
    text: &str,
    opts: &ImportOptions,
    hints: &NameHints,
) -> Result<RunData, ImportError> {
    let mut rdr = csv_reader(text);
    let (header, hline) = csv_header(src, &mut rdr)?;
    let col = |name: &str| header.iter().position(|c| c == name);
    let tasks_col = col("tasks").ok_or_else(|| {
        src.line_err(
            hline,
            format!(
                "expected runtest.py's header `tasks,processes,processes_idle,threads,\
                 threads_idle,linear`, found {} (no `tasks` column)",
                quote(&header.iter().collect::<Vec<_>>().join(","))
            ),
        )
    })?;
    let modes: Vec<(&str, usize)> = ["processes", "threads"]
        .into_iter()
        .filter(|m| opts.mode.as_deref().is_none_or(|o| o == *m))
        .filter_map(|m| col(m).map(|c| (m, c)))
        .collect();
    if modes.is_empty() {
        return Err(src.line_err(
            hline,
            match &opts.mode {
                Some(m) => format!("no `{m}` column (the mode given)"),
                None => "expected a `processes` or `threads` column".into(),
            },
        ));
    }
    let workload = opts
        .workload
        .clone()
        .or_else(|| hints.workload.clone())
        .ok_or_else(|| {
            src.file_err(
                "runtest.py's CSV does not name its testcase (runtest.py's output is saved as \
                 <testcase>.csv); give --workload"
                    .into(),
            )
        })?;
    let metric = if workload.starts_with("page_fault") {
        "faults/sec"
    } else {
        "ops/sec"
    };

    let mut samples = Samples::new();
    // Every column runtest.py prints is checked in the form it prints it, whether or not the
    // mode given takes it: a cut or edited cell anywhere makes the whole row suspect.
    let averages: Vec<(&str, usize)> = ["processes", "threads"]
        .into_iter()
        .filter_map(|m| col(m).map(|c| (m, c)))
        .collect();
    let idles: Vec<(&str, usize)> = ["processes_idle", "threads_idle"]
        .into_iter()
        .filter_map(|m| col(m).map(|c| (m, c)))
        .collect();
    let linear_col = col("linear");
    let mut repeat = 0u32;
    // The better 1-task average of this repetition, with its line: runtest.py prints `linear`
    // as that times the task count.
    let mut one_task: Option<(i64, usize)> = None;
    for rec in rdr.records() {
        let rec = rec.map_err(|e| src.csv_err(&e))?;
        let n = record_line(&rec);
        if rec.iter().eq(header.iter()) {
            repeat += 1;
            one_task = None;
            continue;
        }
        let cell = |c: usize| rec.get(c).unwrap_or("");
        let tasks = parse_uint(cell(tasks_col))
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| {
                src.line_err(
                    n,
                    format!(
                        "expected a task count in column `tasks`, found {}",
                        quote(cell(tasks_col))
                    ),
                )
            })?;
        if tasks == 0 {
            // runtest.py's origin row, printed as the literal `0,0,100,0,100,0`.
            let origin = averages
                .iter()
                .map(|&(name, c)| (name, c, "0"))
                .chain(idles.iter().map(|&(name, c)| (name, c, "100")))
                .chain(linear_col.map(|c| ("linear", c, "0")));
            for (name, c, want) in origin {
                if cell(c) != want {
                    return Err(src.line_err(
                        n,
                        format!(
                            "expected {want} in column `{name}` of runtest.py's `0,0,100,0,100,0` \
                             row, found {}",
                            quote(cell(c))
                        ),
                    ));
                }
            }
            continue;
        }
        let mut best: Option<i64> = None;
        for &(name, c) in &averages {
            let v = parse_int(cell(c)).filter(|&v| v >= -1).ok_or_else(|| {
                src.line_err(
                    n,
                    format!(
                        "expected a whole number (runtest.py's average, or -1 for a run that \
                         printed none) in column `{name}`, found {}",
                        quote(cell(c))
                    ),
                )
            })?;
            best = Some(best.map_or(v, |b| b.max(v)));
            if v > 0 && modes.iter().any(|&(m, _)| m == name) {
                samples
                    .entry((key(name, tasks, metric, true), repeat))
                    .or_default()
                    .push(v as f64);
            }
        }
        for &(name, c) in &idles {
            let ok = is_fixed(cell(c), 2) && cell(c).parse::<f64>().is_ok_and(|v| v <= 100.0);
            if !ok {
                return Err(src.line_err(
                    n,
                    format!(
                        "expected a percentage with two decimals (0.00 to 100.00) in column \
                         `{name}`, found {}",
                        quote(cell(c))
                    ),
                ));
            }
        }
        if tasks == 1 && averages.len() == 2 {
            one_task = best.map(|b| (b, n));
        }
        if let Some(c) = linear_col {
            let linear = parse_int(cell(c)).ok_or_else(|| {
                src.line_err(
                    n,
                    format!(
                        "expected a whole number in column `linear`, found {}",
                        quote(cell(c))
                    ),
                )
            })?;
            if let Some((one, line)) = one_task {
                let want = i128::from(one) * i128::from(tasks);
                if i128::from(linear) != want {
                    return Err(src.line_err(
                        n,
                        format!(
                            "linear {linear} is not {tasks} x {one}, the better 1-task average \
                             on line {line}: the row is damaged or edited"
                        ),
                    ));
                }
            }
        }
    }
    if samples.is_empty() {
        return Err(src.no_samples("no row with a task count above 0 and a positive average"));
    }
    Ok(RunData {
        meta: meta(Format::WillItScaleCsv.tool(), workload, opts),
        status: Status::Complete,
        samples: into_samples(samples),
    })
}

// ---------------------------------------------------------------------------------------------
// pft

const PFT_COLUMNS: [&str; 8] = [
    "Gb",
    "Thr",
    "CLine",
    "User",
    "System",
    "Wall",
    "flt/cpu/s",
    "fault/wsec",
];
const PFT_COLUMNS_REP: [&str; 9] = [
    "Gb",
    "Rep",
    "Thr",
    "CLine",
    "User",
    "System",
    "Wall",
    "flt/cpu/s",
    "fault/wsec",
];

/// Whether `l` (trimmed) is meant as a result row: it starts like a number. Anything else is one
/// of pft's diagnostics, which are words; a row whose first number is damaged (`+1`, `.5`)
/// must be refused, not skipped as a diagnostic.
fn is_pft_row(l: &str) -> bool {
    l.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))
}

fn is_pft_header(l: &str) -> bool {
    l.split_whitespace().next() == Some("Gb")
        && (l.contains("flt/cpu/s") || l.contains("fault/wsec"))
}

/// `(Thr, flt/cpu/s, fault/wsec)` of a result row; `with_rep` says whether a `Rep` column is
/// there (`None`: tell by the number of fields).
fn parse_pft_fields(l: &str, with_rep: Option<bool>) -> Result<(u32, f64, f64), String> {
    let f: Vec<&str> = l.split_whitespace().collect();
    let rep = match (with_rep, f.len()) {
        (Some(r), n) if n == if r { 9 } else { 8 } => r,
        (None, 8) => false,
        (None, 9) => true,
        (Some(r), n) => {
            let cols = if r {
                PFT_COLUMNS_REP.join(" ")
            } else {
                PFT_COLUMNS.join(" ")
            };
            return Err(format!(
                "expected {} fields like the header ({cols}), found {n}",
                if r { 9 } else { 8 }
            ));
        }
        (None, n) => {
            return Err(format!(
                "expected a pft result row of 8 fields ({}) or 9 (with Rep), found {n}",
                PFT_COLUMNS.join(" ")
            ));
        }
    };
    let cols: &[&str] = if rep { &PFT_COLUMNS_REP } else { &PFT_COLUMNS };
    let int = |i: usize| -> Result<u64, String> {
        parse_uint(f[i]).ok_or_else(|| {
            format!(
                "expected a whole number in column {}, found {}",
                cols[i],
                quote(f[i])
            )
        })
    };
    // pft prints its times as `%8.2fs` and its rates as `%10.3f`. Older builds (the ones with
    // a `Rep` column) printed times with three decimals; the unit and the rates' three decimals
    // are common to both.
    let time = |i: usize| -> Result<f64, String> {
        let ok = f[i]
            .strip_suffix('s')
            .filter(|t| is_fixed(t, 2) || (rep && is_fixed(t, 3)));
        ok.and_then(|t| t.parse::<f64>().ok()).ok_or_else(|| {
            format!(
                "expected a time in seconds like `0.58s` in column {}, found {}",
                cols[i],
                quote(f[i])
            )
        })
    };
    let rate = |i: usize| -> Result<f64, String> {
        Some(f[i])
            .filter(|r| is_fixed(r, 3))
            .and_then(|r| r.parse::<f64>().ok())
            .ok_or_else(|| {
                format!(
                    "expected a rate with three decimals like `294978.661` in column {}, found {}",
                    cols[i],
                    quote(f[i])
                )
            })
    };
    let o = usize::from(rep);
    int(0)?;
    if rep {
        int(1)?;
    }
    let thr = int(1 + o)?;
    int(2 + o)?;
    let (user, system, wall) = (time(3 + o)?, time(4 + o)?, time(5 + o)?);
    let per_cpu = rate(6 + o)?;
    let per_wsec = rate(7 + o)?;
    if per_cpu <= 0.0 || per_wsec <= 0.0 {
        return Err(format!(
            "fault rates must be positive, found flt/cpu/s {per_cpu} and fault/wsec {per_wsec}"
        ));
    }
    let thr = u32::try_from(thr).ok().filter(|&t| t > 0).ok_or_else(|| {
        format!("expected a thread count of at least 1 in column Thr, found {thr}")
    })?;
    if !rep {
        check_pft_rates(user, system, wall, per_cpu, per_wsec)?;
    }
    Ok((thr, per_cpu, per_wsec))
}

/// pft computes both rates from one fault count, `pages / (user + system)` and `pages / wall`,
/// from the unrounded times, then prints the times rounded to hundredths. So the count each
/// rate implies, over the range of times that round to the printed ones, must overlap: a rate
/// cut short, or a time or rate edited, falls outside. Only the current layout is checked: the
/// older `Rep` builds counted their faults differently.
fn check_pft_rates(
    user: f64,
    system: f64,
    wall: f64,
    per_cpu: f64,
    per_wsec: f64,
) -> Result<(), String> {
    // Half a hundredth per printed time, half a thousandth per printed rate, and a little for
    // floating point.
    let range = |rate: f64, secs: f64, slack: f64| {
        let lo = (rate - 0.0005) * (secs - slack).max(0.0);
        let hi = (rate + 0.0005) * (secs + slack);
        (lo * (1.0 - 1e-9), hi * (1.0 + 1e-9))
    };
    let cpu = range(per_cpu, user + system, 0.01);
    let wsec = range(per_wsec, wall, 0.005);
    if cpu.0 <= wsec.1 && wsec.0 <= cpu.1 {
        return Ok(());
    }
    Err(format!(
        "flt/cpu/s {per_cpu:.3} x (User + System) {:.2}s = {:.0} faults, but fault/wsec \
         {per_wsec:.3} x Wall {wall:.2}s = {:.0}: pft derives both from one fault count, so the \
         row is damaged or edited",
        user + system,
        per_cpu * (user + system),
        per_wsec * wall
    ))
}

fn parse_pft(
    src: &Src<'_>,
    text: &str,
    opts: &ImportOptions,
    hints: &NameHints,
) -> Result<RunData, ImportError> {
    let mode = opts
        .mode
        .clone()
        .or_else(|| hints.mode.clone())
        .unwrap_or_else(|| "threads".to_string());
    check_mode(&mode).map_err(|m| src.file_err(m))?;
    let workload = opts.workload.clone().unwrap_or_else(|| "pft".to_string());

    let mut with_rep: Option<bool> = None;
    let mut samples = Samples::new();
    let mut repeats: BTreeMap<u32, u32> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let l = raw.trim();
        if is_pft_header(l) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            with_rep = if cols == PFT_COLUMNS {
                Some(false)
            } else if cols == PFT_COLUMNS_REP {
                Some(true)
            } else {
                return Err(src.line_err(
                    n,
                    format!(
                        "expected pft's header `{}` (or with Rep after Gb), found {}",
                        PFT_COLUMNS.join(" "),
                        quote(l)
                    ),
                ));
            };
            continue;
        }
        if !is_pft_row(l) {
            continue; // empty, `TAG pft:...`, or one of pft's diagnostics
        }
        let (thr, per_cpu, per_wsec) =
            parse_pft_fields(l, with_rep).map_err(|m| src.line_err(n, m))?;
        let r = repeats.entry(thr).or_insert(0);
        samples.insert((key(&mode, thr, "faults/cpu", true), *r), vec![per_cpu]);
        samples.insert((key(&mode, thr, "faults/sec", true), *r), vec![per_wsec]);
        *r += 1;
    }
    if samples.is_empty() {
        return Err(src.no_samples(
            "no pft result row (`Gb Thr CLine User System Wall flt/cpu/s fault/wsec`)",
        ));
    }
    Ok(RunData {
        meta: meta(Format::Pft.tool(), workload, opts),
        status: Status::Complete,
        samples: into_samples(samples),
    })
}

// ---------------------------------------------------------------------------------------------
// plain CSV

const CSV_COLUMNS: [&str; 7] = [
    "tasks",
    "value",
    "mode",
    "metric",
    "higher_is_better",
    "repeat",
    "workload",
];

/// Columns that `pagelab export` writes and an import does not take over: the import's own
/// label, origin and run replace them, and samples keep their file order. One import is one
/// run, so a file holding several runs or labels is refused (export one at a time), and a run
/// exported as incomplete imports as incomplete.
const EXPORT_ONLY_COLUMNS: [&str; 5] = ["run_id", "label", "origin", "status", "seq"];

fn parse_csv(
    src: &Src<'_>,
    text: &str,
    opts: &ImportOptions,
    hints: &NameHints,
) -> Result<RunData, ImportError> {
    let mut rdr = csv_reader(text);
    let (header, hline) = csv_header(src, &mut rdr)?;
    if let Some(c) = header
        .iter()
        .find(|c| !CSV_COLUMNS.contains(c) && !EXPORT_ONLY_COLUMNS.contains(c))
    {
        return Err(src.line_err(
            hline,
            format!(
                "unknown column {}; expected {}",
                quote(c),
                CSV_COLUMNS.join(", ")
            ),
        ));
    }
    let col = |name: &str| header.iter().position(|c| c == name);
    let (Some(tasks_col), Some(value_col)) = (col("tasks"), col("value")) else {
        return Err(src.line_err(
            hline,
            format!(
                "expected a header with columns `tasks` and `value`, found {}",
                quote(&header.iter().collect::<Vec<_>>().join(","))
            ),
        ));
    };
    let (mode_col, metric_col, hib_col, repeat_col, workload_col) = (
        col("mode"),
        col("metric"),
        col("higher_is_better"),
        col("repeat"),
        col("workload"),
    );
    let default_mode = opts.mode.clone().unwrap_or_else(|| "threads".to_string());
    let (run_col, label_col, status_col) = (col("run_id"), col("label"), col("status"));
    // The first row's run and label, which every other row must repeat.
    let mut first_run: Option<(String, String, usize)> = None;
    let mut incomplete = false;

    let mut samples = Samples::new();
    let mut workload: Option<(String, usize)> = None;
    // Each metric's direction, with the line that set it.
    let mut directions: BTreeMap<String, (bool, usize)> = BTreeMap::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| src.csv_err(&e))?;
        let n = record_line(&rec);
        // Cells as `export` wrote them: a quote it put before a formula character comes off.
        let cell = |c: Option<usize>| {
            (c.and_then(|c| rec.get(c)).map(crate::csv_text::restore)).filter(|s| !s.is_empty())
        };
        let err = |m: String| src.line_err(n, m);
        let tasks = cell(Some(tasks_col))
            .and_then(parse_uint)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|&t| t > 0)
            .ok_or_else(|| {
                err(format!(
                    "expected a task count of at least 1 in column `tasks`, found {}",
                    quote(cell(Some(tasks_col)).unwrap_or(""))
                ))
            })?;
        let value = cell(Some(value_col))
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                err(format!(
                    "expected a finite number in column `value`, found {}",
                    quote(cell(Some(value_col)).unwrap_or(""))
                ))
            })?;
        let this_run = (
            cell(run_col).unwrap_or("").to_string(),
            cell(label_col).unwrap_or("").to_string(),
        );
        match &first_run {
            None => first_run = Some((this_run.0, this_run.1, n)),
            Some((r, l, line)) if (r, l) != (&this_run.0, &this_run.1) => {
                return Err(err(format!(
                    "run {} label {} differs from run {} label {} on line {line}: one import is one run; export one run or label at a time (pagelab export --id N)",
                    quote(&this_run.0),
                    quote(&this_run.1),
                    quote(r),
                    quote(l)
                )));
            }
            Some(_) => {}
        }
        match cell(status_col) {
            None | Some("complete") => {}
            Some("incomplete") | Some("running") => incomplete = true,
            Some(other) => {
                return Err(err(format!(
                    "expected complete, incomplete or running in column `status`, found {}",
                    quote(other)
                )));
            }
        }
        let mode = cell(mode_col).unwrap_or(&default_mode);
        check_mode(mode).map_err(err)?;
        let metric = cell(metric_col).unwrap_or("faults/sec");
        let hib = match cell(hib_col) {
            None => true,
            Some(s) if s.eq_ignore_ascii_case("true") => true,
            Some(s) if s.eq_ignore_ascii_case("false") => false,
            Some(s) => {
                return Err(err(format!(
                    "expected `true` or `false` in column `higher_is_better`, found {}",
                    quote(s)
                )));
            }
        };
        if hib && value <= 0.0 {
            return Err(err(format!(
                "a rate must be positive, found {value} for higher-is-better metric {}",
                quote(metric)
            )));
        }
        match directions.get(metric) {
            Some(&(d, line)) if d != hib => {
                return Err(err(format!(
                    "metric {} is higher_is_better {hib} here but {d} on line {line}",
                    quote(metric)
                )));
            }
            Some(_) => {}
            None => {
                directions.insert(metric.to_string(), (hib, n));
            }
        }
        let repeat = match cell(repeat_col) {
            None => 0,
            Some(s) => parse_uint(s)
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| {
                    err(format!(
                        "expected a repeat number (0, 1, ...) in column `repeat`, found {}",
                        quote(s)
                    ))
                })?,
        };
        if let Some(w) = cell(workload_col) {
            if let Some(o) = &opts.workload
                && o != w
            {
                return Err(err(format!(
                    "workload {} differs from the one given ({})",
                    quote(w),
                    quote(o)
                )));
            }
            match &workload {
                Some((prev, line)) if prev != w => {
                    return Err(err(format!(
                        "workload {} differs from {} on line {line}: a run has one workload",
                        quote(w),
                        quote(prev)
                    )));
                }
                Some(_) => {}
                None => workload = Some((w.to_string(), n)),
            }
        }
        samples
            .entry((key(mode, tasks, metric, hib), repeat))
            .or_default()
            .push(value);
    }
    if samples.is_empty() {
        return Err(src.no_samples("no row under the header"));
    }
    let workload = workload
        .map(|(w, _)| w)
        .or_else(|| opts.workload.clone())
        .or_else(|| hints.workload.clone())
        .ok_or_else(|| src.file_err("the CSV has no `workload` column; give --workload".into()))?;
    Ok(RunData {
        meta: meta(Format::Csv.tool(), workload, opts),
        status: if incomplete {
            Status::Incomplete
        } else {
            Status::Complete
        },
        samples: into_samples(samples),
    })
}

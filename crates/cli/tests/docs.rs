//! The documentation runs: every `pagelab` command line shown in README.md and docs/*.md, and
//! every subcommand's `--help`.
//!
//! The convention the docs follow (docs/contributor-guide.md, "Examples in the docs"): each line
//! of a fenced code block that starts with `pagelab ` (or `$ pagelab `) is an example, continued
//! over lines ending in `\`, a trailing `# comment` not part of it. It is run in a scratch
//! directory on a scratch store and must succeed. A block whose examples take minutes, or need
//! what a reader has and a test does not (their own result files, runs stored under their
//! labels), is marked by an HTML comment on the line before its fence,
//! `<!-- examples: parse-only (why) -->`: its command lines are checked against the parser
//! (`PAGELAB_PARSE_ONLY=1`: parsed, then exit 0 without running), so a renamed flag or a value
//! no longer accepted still fails here. An example that runs longer than [`EXAMPLE_LIMIT`] is
//! stopped and fails, naming the mark it lacks, rather than stalling the suite.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Dir;

/// How a block's examples are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Run,
    ParseOnly,
}

#[derive(Debug)]
struct Example {
    /// `file:line` of its first line.
    at: String,
    args: Vec<String>,
    check: Check,
}

const MARK: &str = "<!-- examples: parse-only";

fn docs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    files.extend(guides);
    files
}

/// The examples of one markdown text.
fn examples(name: &str, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut check = Check::Run;
    let mut prev = "";
    let mut pending: Option<(String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            check = if in_block && prev.trim_start().starts_with(MARK) {
                Check::ParseOnly
            } else {
                Check::Run
            };
            prev = line;
            continue;
        }
        prev = line;
        if !in_block {
            continue;
        }
        let l = line.trim();
        let (at, mut cmd) = match pending.take() {
            Some((at, so_far)) => (at, so_far),
            None => {
                let l = l.strip_prefix("$ ").unwrap_or(l);
                if !l.starts_with("pagelab ") {
                    continue;
                }
                (format!("{name}:{}", i + 1), String::new())
            }
        };
        let l = l.strip_prefix("$ ").unwrap_or(l);
        let l = l.split(" #").next().unwrap_or(l).trim();
        match l.strip_suffix('\\') {
            Some(head) => {
                cmd.push_str(head);
                cmd.push(' ');
                pending = Some((at, cmd));
            }
            None => {
                cmd.push_str(l);
                let args: Vec<String> = cmd.split_whitespace().skip(1).map(String::from).collect();
                out.push(Example { at, args, check });
            }
        }
    }
    assert!(pending.is_none(), "{name}: an example ends in `\\`");
    out
}

/// How long an example that runs may take. Longer ones belong under a parse-only mark: a
/// `reproduce` of a whole experiment set runs for tens of minutes, and CI would wait for it.
const EXAMPLE_LIMIT: Duration = Duration::from_secs(90);

fn pagelab(dir: &Path, args: &[String], parse_only: bool) -> Output {
    pagelab_within(dir, args, parse_only, EXAMPLE_LIMIT)
}

/// Runs `pagelab args` on the scratch store in `dir`, stopping it after `limit` (then it fails,
/// with a stderr that says why). Its output goes through files, so that a chatty example cannot
/// fill a pipe nobody reads while it is being waited for.
fn pagelab_within(dir: &Path, args: &[String], parse_only: bool, limit: Duration) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pagelab"));
    c.args(args)
        .arg("--db")
        .arg(dir.join("results.db"))
        .current_dir(dir)
        .env_remove("PAGELAB_DB")
        .env_remove("PAGELAB_PARSE_ONLY");
    if parse_only {
        c.env("PAGELAB_PARSE_ONLY", "1");
    }
    let (out, err) = (dir.join("example.stdout"), dir.join("example.stderr"));
    c.stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap());
    let mut child = c.spawn().expect("the pagelab binary runs");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            child.kill().ok();
            let s = child.wait().unwrap();
            std::fs::write(
                &err,
                format!(
                    "ran longer than {} s and was stopped: mark its block `<!-- examples: parse-only (why) -->`",
                    limit.as_secs_f64()
                ),
            )
            .unwrap();
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read(p).unwrap_or_default();
    Output {
        status,
        stdout: read(&out),
        stderr: read(&err),
    }
}

/// An example that would run past the limit is stopped, fails, and says which mark it lacks.
#[test]
fn an_example_running_past_the_limit_is_stopped_and_fails() {
    let dir = Dir::new("docs-limit");
    let args: Vec<String> = ["micro", "fault", "--size", "1G", "--rounds", "1000"]
        .map(String::from)
        .to_vec();
    let t = Instant::now();
    let o = pagelab_within(&dir.0, &args, false, Duration::from_millis(500));
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("parse-only"),
        "{o:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
fn the_extractor_reads_blocks_continuations_comments_and_marks() {
    let text = "intro\n```sh\npagelab info   # the host\n$ pagelab run pft \\\n    --tasks 1\ncargo build\n```\n<!-- examples: parse-only (minutes) -->\n```sh\npagelab validate\n```\n`pagelab inline` is not an example\n";
    let ex = examples("t.md", text);
    let got: Vec<(String, Vec<String>, Check)> =
        ex.into_iter().map(|e| (e.at, e.args, e.check)).collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        vec![
            ("t.md:3".to_string(), s(&["info"]), Check::Run),
            (
                "t.md:4".to_string(),
                s(&["run", "pft", "--tasks", "1"]),
                Check::Run
            ),
            ("t.md:10".to_string(), s(&["validate"]), Check::ParseOnly),
        ]
    );
}

/// The parse-only hook parses: a flag that does not exist still fails, with clap's status 2.
#[test]
fn parse_only_still_refuses_a_bad_command_line() {
    let dir = Dir::new("docs-parse-only");
    let bad = pagelab(
        &dir.0,
        &["run".into(), "pft".into(), "--no-such-flag".into()],
        true,
    );
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let good = pagelab(&dir.0, &["validate".into()], true);
    assert!(good.status.success(), "{good:?}");
    assert!(good.stdout.is_empty() && !dir.0.join("results.db").exists());
}

#[test]
fn every_example_in_the_docs_runs() {
    let mut all = Vec::new();
    for f in docs() {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        all.extend(examples(&name, &std::fs::read_to_string(&f).unwrap()));
    }
    // The docs show some forty examples; far fewer means the extractor lost them.
    assert!(all.len() >= 30, "only {} examples found", all.len());
    assert!(all.iter().any(|e| e.check == Check::Run));
    // One scratch directory for all, in order: an example may use what one before it wrote
    // (a trace file, a stored run), as a reader following the text would.
    let dir = Dir::new("docs-examples");
    let mut failed = Vec::new();
    for e in &all {
        let o = pagelab(&dir.0, &e.args, e.check == Check::ParseOnly);
        if !o.status.success() {
            failed.push(format!(
                "{} ({:?}) pagelab {}: {}",
                e.at,
                e.check,
                e.args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The subcommands `--help` lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A description wrapped onto more lines is indented further than the names.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_subcommands_help_exits_0() {
    let dir = Dir::new("docs-help");
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        let mut args = path.clone();
        args.push("--help".into());
        let o = pagelab(&dir.0, &args, false);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success() && out.contains("Usage:"),
            "pagelab {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
        seen += 1;
        for c in subcommands(&out) {
            let mut p = path.clone();
            p.push(c);
            queue.push(p);
        }
    }
    // pagelab itself, its subcommands and micro's.
    assert!(seen >= 20, "only {seen} help pages");
}

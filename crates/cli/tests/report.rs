//! `pagelab plot` and `pagelab report` end to end, each test on its own store in a temporary
//! directory, filled by real engine runs and by projected runs stored through the library (as
//! the projector stores them). The report is opened in headless Chromium and checked by what
//! the browser builds from it: its tables and numbers, its plots, and that no label, command
//! line or host string became markup.
//!
//! Chromium is required, not optional: `scripts/test` installs it; without it the report test
//! fails and says what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pagelab_bench::results::{Origin, RunData, RunMeta, SampleKey, Status};
use pagelab_bench::store::Store;

mod common;
use common::{Dir, fails, ok};

/// A short page_fault1 run on the engine, both modes, 1 and 2 tasks, 2 samples each.
fn engine_run(db: &Path, profile: &str, label: &str) {
    ok(
        db,
        &[
            "run",
            "page_fault1",
            "--profile",
            profile,
            "--tasks",
            "1,2",
            "--mode",
            "both",
            "--samples",
            "2",
            "--warmup",
            "0",
            "--interval-ms",
            "100",
            "--memsize",
            "8M",
            "--label",
            label,
        ],
    );
}

/// A run as the projector stores it: origin projected, target `projector`, the machine
/// description's name; threads, 1 to 8 tasks, `per_task` faults/sec per task, and a second
/// metric when `cpu` is set.
fn projected(db: &Path, label: &str, machine: &str, per_task: f64, cpu: bool) -> RunData {
    let mut samples = Vec::new();
    for t in [1u32, 2, 4, 8] {
        let v = per_task * f64::from(t);
        let key = |metric: &str| SampleKey {
            mode: "threads".into(),
            tasks: t,
            metric: metric.into(),
            higher_is_better: true,
        };
        samples.push((key("faults/sec"), 0, vec![v, v * 1.01, v * 0.99]));
        if cpu {
            samples.push((key("faults/cpu"), 0, vec![per_task, per_task * 1.01]));
        }
    }
    let data = RunData {
        meta: RunMeta {
            label: label.into(),
            workload: "page_fault1".into(),
            target: "projector".into(),
            origin: Origin::Projected,
            profile: None,
            profile_toml: None,
            host_json: None,
            machine: Some(machine.into()),
            experiment: None,
            pagelab_version: "0.1.0".into(),
            command: "pagelab project".into(),
        },
        status: Status::Complete,
        samples,
    };
    Store::open(db).unwrap().insert_run(&data).unwrap();
    data
}

/// What a store holds, as pagelab reports it.
fn content(db: &Path) -> String {
    ok(db, &["runs", "--json"]) + &ok(db, &["export", "--format", "json"])
}

/// Width, height and RGB(A) pixels of a PNG file.
fn decode_png(path: &Path) -> (u32, u32, usize, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    let channels = info.color_type.samples();
    (info.width, info.height, channels, buf)
}

/// Pixels that are not white, and distinct colours.
fn ink(channels: usize, px: &[u8]) -> (usize, usize) {
    let mut colours = std::collections::HashSet::new();
    let mut non_white = 0;
    for p in px.chunks(channels) {
        if p[..3] != [255, 255, 255] {
            non_white += 1;
        }
        colours.insert([p[0], p[1], p[2]]);
    }
    (non_white, colours.len())
}

#[test]
fn plot_draws_measured_and_projected_apart_as_svg_and_png() {
    let d = Dir::new("report-plot");
    let db = d.db();
    engine_run(&db, "mm-unstable-20230210", "a");
    engine_run(&db, "pvl-v2", "b");
    projected(&db, "a", "big-box", 1e5, true);
    projected(&db, "b", "big-box", 1.1e5, true);
    let before = content(&db);

    // A directory: one file per workload and metric.
    let dir = d.path("plots");
    let out = ok(&db, &["plot", "a", "b", "--out", dir.to_str().unwrap()]);
    let files: Vec<&str> = out.lines().collect();
    assert_eq!(files.len(), 2, "{out}");
    let svg = std::fs::read_to_string(dir.join("page_fault1_faults-sec_scaling.svg")).unwrap();
    for want in [
        "page_fault1: faults/sec by task count",
        "a (measured)",
        "b (measured)",
        "a (projected for big-box)",
        "b (projected for big-box)",
        "perfect scaling of a (1-task mean × tasks, measured)",
        "measured: engine on ",
        "projected for big-box",
        "number of processes (log scale)",
        "number of threads (log scale)",
        "faults/sec, Hmean ± HStddev",
    ] {
        assert!(svg.contains(want), "the scaling plot lacks {want:?}");
    }
    // Per-CPU rates scale perfectly when they stay flat.
    let cpu = std::fs::read_to_string(dir.join("page_fault1_faults-cpu_scaling.svg")).unwrap();
    assert!(cpu.contains("perfect scaling of a (1-task mean, projected for big-box)"));

    // One file, PNG, the change against the baseline: a real picture.
    let png = d.path("change.png");
    ok(
        &db,
        &[
            "plot",
            "a",
            "b",
            "--kind",
            "change",
            "--metric",
            "faults/sec",
            "--out",
            png.to_str().unwrap(),
        ],
    );
    let (w, h, channels, px) = decode_png(&png);
    assert_eq!(w, 1280, "two panels side by side");
    assert!(h > 500, "{h}");
    let (non_white, colours) = ink(channels, &px);
    assert!(non_white > 20_000, "{non_white} non-white pixels");
    assert!(colours > 50, "{colours} colours: text is anti-aliased");
    // Projected b is 10% better than projected a: its points are in the vermillion of label 2.
    let vermillion = px
        .chunks(channels)
        .filter(|p| p[..3] == [213, 94, 0])
        .count();
    assert!(vermillion > 300, "{vermillion}");

    // Only measured runs, only threads, as SVG by name.
    let m = d.path("m.svg");
    ok(
        &db,
        &[
            "plot",
            "a",
            "b",
            "--origin",
            "measured",
            "--mode",
            "threads",
            "--metric",
            "faults/sec",
            "--out",
            m.to_str().unwrap(),
        ],
    );
    let m = std::fs::read_to_string(&m).unwrap();
    assert!(m.contains("a (measured)") && !m.contains("projected"));
    assert!(m.contains(">\nthreads\n</text>") && !m.contains(">\nprocesses\n</text>"));

    // Bad input: one line, non-zero, nothing written, nothing stored changed.
    let bad = d.path("bad.svg");
    let b = bad.to_str().unwrap();
    fails(&db, &["plot", "a", "b", "--out", b], "2 plots match");
    fails(
        &db,
        &["plot", "a", "--kind", "pie", "--out", b],
        "invalid value 'pie' for '--kind <KIND>' [possible values: scaling, change]",
    );
    fails(
        &db,
        &["plot", "a", "--format", "pdf", "--out", b],
        "invalid value 'pdf' for '--format <FORMAT>' [possible values: svg, png]",
    );
    fails(
        &db,
        &["plot", "a", "--format", "png", "--out", b],
        "does not match the file name",
    );
    fails(
        &db,
        &["plot", "a", "b", "--metric", "nope", "--out", b],
        "nothing to plot: no samples of metric `nope`",
    );
    fails(
        &db,
        &[
            "plot",
            "a",
            "--kind",
            "change",
            "--metric",
            "faults/sec",
            "--out",
            b,
        ],
        "no change to plot",
    );
    let nodir = d.path("no-dir");
    fails(
        &db,
        &[
            "plot",
            "a",
            "--kind",
            "change",
            "--out",
            nodir.to_str().unwrap(),
        ],
        "no change to plot",
    );
    assert!(!nodir.exists(), "a failed plot created its directory");
    fails(
        &db,
        &["plot", "a", "--origin", "imported", "--out", b],
        "no imported samples",
    );
    fails(
        &db,
        &["plot", "a", "--origin", "guessed", "--out", b],
        "invalid value 'guessed' for '--origin <ORIGIN>'",
    );
    fails(&db, &["plot", "zz", "--out", b], "unknown label `zz`");
    fails(&db, &["plot", "--out", b], "nothing to plot");
    fails(&db, &["plot", "a", "a", "--out", b], "named twice");
    assert!(!bad.exists(), "a failed plot wrote a file");
    let missing = d.path("none.db");
    fails(&missing, &["plot", "a", "--out", b], "no results store");
    assert!(!missing.exists(), "plot created a store");
    assert!(content(&db) == before, "plotting changed the store");
}

/// Where Chromium is: `$PAGELAB_CHROMIUM`, else Debian's `/usr/bin/chromium`.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PAGELAB_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "this test renders the report in headless Chromium, and {} does not exist: install it (`apt-get install -y chromium`, which scripts/test does) or set PAGELAB_CHROMIUM",
        path.display()
    );
    path
}

/// Runs headless Chromium on `page` with `args` (no network, a fresh profile), for at most
/// two minutes; returns what it printed on standard output. Its output goes to files, not
/// pipes, so that a large DOM cannot block it on a full pipe.
fn browse(scratch: &Path, page: &Path, args: &[&str]) -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let (out_path, err_path) = (
        scratch.join(format!("chromium-{n}.out")),
        scratch.join(format!("chromium-{n}.err")),
    );
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join(format!("chromium-profile-{n}")).display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within two minutes (a script dialog blocks it: did script get into the report?)"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "chromium failed: {}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    std::fs::read_to_string(&out_path).unwrap()
}

/// An element of a serialised DOM: its name and attributes.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The start tags of a DOM as Chromium serialises it. In a serialised DOM a `<` in text is
/// written `&lt;`, so every `<` outside an attribute value opens a tag: what this finds is
/// exactly the elements the browser built.
fn elements(dom: &str) -> Vec<Element> {
    let b = dom.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = dom[i..].find('<') {
        let mut j = i + off + 1;
        if dom[j..].starts_with("!--") {
            i = dom[j..].find("-->").map_or(dom.len(), |e| j + e + 3);
            continue;
        }
        let name_end = j + dom[j..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(dom.len() - j);
        let name = dom[j..name_end].to_ascii_lowercase();
        j = name_end;
        let mut attrs = Vec::new();
        loop {
            while j < b.len() && (b[j] as char).is_ascii_whitespace() {
                j += 1;
            }
            if j >= b.len() || b[j] == b'>' || b[j] == b'/' {
                break;
            }
            let n_end = j + dom[j..]
                .find(|c: char| c == '=' || c == '>' || c.is_ascii_whitespace())
                .unwrap_or(dom.len() - j);
            let attr = dom[j..n_end].to_ascii_lowercase();
            j = n_end;
            let mut value = String::new();
            if j < b.len() && b[j] == b'=' {
                j += 1;
                if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                    let q = b[j] as char;
                    let v_end = j + 1 + dom[j + 1..].find(q).unwrap_or(dom.len() - j - 1);
                    value = dom[j + 1..v_end].to_string();
                    j = v_end + 1;
                } else {
                    let v_end = j + dom[j..]
                        .find(|c: char| c == '>' || c.is_ascii_whitespace())
                        .unwrap_or(dom.len() - j);
                    value = dom[j..v_end].to_string();
                    j = v_end;
                }
            }
            attrs.push((attr, value));
        }
        if !name.is_empty() {
            out.push(Element { name, attrs });
        }
        i = (j + 1).min(dom.len());
    }
    out
}

#[test]
fn report_renders_in_chromium_with_its_numbers_plots_and_no_injected_markup() {
    let d = Dir::new("report-html");
    let db = d.db();
    let l1 = "<script>alert(1)</script>";
    let l2 = "\"><img/src=x/onerror=alert(2)>";
    engine_run(&db, "mm-unstable-20230210", l1);
    engine_run(&db, "pvl-v2", l2);
    // Projected runs with every stored string hostile.
    let l3 = "\"><img src=x onerror=alert(3)>";
    let mut p = projected(&db, l1, "<i>big</i>", 3e5, false);
    p.meta.label = l3.into();
    p.meta.command = "pagelab project <script>alert(5)</script>".into();
    p.meta.host_json = Some("{\"cpu\": \"<svg onload=alert(4)>\"}".into());
    p.meta.profile = Some("<b>prof</b>".into());
    p.meta.profile_toml =
        Some("name = \"<b>prof</b>\"\ndescription = \"<script>alert(6)</script>\"\n".into());
    Store::open(&db).unwrap().insert_run(&p).unwrap();
    let before = content(&db);

    let out_dir = d.path("report");
    let printed = ok(
        &db,
        &["report", l1, l2, l3, "--out", out_dir.to_str().unwrap()],
    );
    let page = out_dir.join("report.html");
    assert_eq!(printed.trim(), page.display().to_string());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no network"
    );
    assert!(content(&db) == before, "the report changed the store");

    let dom = browse(&d.0, &page, &["--dump-dom"]);
    let els = elements(&dom);
    let named = |n: &str| els.iter().filter(|e| e.name == n).collect::<Vec<_>>();
    assert!(
        named("html").len() == 1 && named("body").len() == 1,
        "{dom}"
    );
    // Nothing hostile became an element: no script, no inline SVG, no <b> or <i>, every image
    // is one of the plots as a data: URI, and no element carries an event handler.
    assert!(named("script").is_empty(), "a script element exists");
    assert!(named("svg").is_empty(), "an svg element exists");
    assert!(named("b").is_empty() && named("i").is_empty());
    let imgs = named("img");
    assert!(imgs.len() >= 6, "{} plots", imgs.len());
    for img in &imgs {
        let src = img.attr("src").unwrap_or_default();
        assert!(src.starts_with("data:image/svg+xml;base64,"), "{img:?}");
    }
    for e in &els {
        assert!(
            e.attrs.iter().all(|(n, _)| !n.starts_with("on")),
            "an event handler: {e:?}"
        );
    }
    // The plots name the labels too, escaped inside the SVG.
    use base64::Engine as _;
    let svg = base64::engine::general_purpose::STANDARD
        .decode(&imgs[0].attr("src").unwrap()["data:image/svg+xml;base64,".len()..])
        .unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt; (measured)"));
    assert!(!svg.contains("<script"));
    // The hostile strings are there, as text.
    for text in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "\"&gt;&lt;img/src=x/onerror=alert(2)&gt;",
        "\"&gt;&lt;img src=x onerror=alert(3)&gt;",
        "&lt;svg onload=alert(4)&gt;",
        "pagelab project &lt;script&gt;alert(5)&lt;/script&gt;",
        "<h2>Projected for &lt;i&gt;big&lt;/i&gt;</h2>",
    ] {
        assert!(dom.contains(text), "the page does not show {text:?}");
    }
    assert!(dom.contains("Projected, not measured"));

    // The comparison tables carry compare's numbers.
    let comparisons = named("table")
        .iter()
        .filter(|t| t.attr("class") == Some("comparison"))
        .count();
    assert!(comparisons >= 3, "{comparisons} comparison tables");
    // (Runs 1 and 2 are the measured ones: compare pools every origin of a label, the report's
    // sections do not.)
    let cmp: serde_json::Value = serde_json::from_str(&ok(
        &db,
        &[
            "compare", l1, l2, "--run", "1", "--run", "2", "--format", "json",
        ],
    ))
    .unwrap();
    let mut checked = 0;
    for s in cmp["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            if r["stat"] != "Hmean" {
                continue;
            }
            for c in r["cells"].as_array().unwrap() {
                let v = format!("<td class=\"num\">{:.4}</td>", c["value"].as_f64().unwrap());
                assert!(dom.contains(&v), "{v} is not in the report");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2, "2 modes x 2 task counts x 2 labels");
    // The engine's counters, the profiles' difference, the host.
    for text in [
        "Lock contention per lock class",
        "zone-&gt;lock",
        "VMA-lock fallbacks and per-CPU list refills and drains",
        "vma_lock_abort",
        "pcp_refill",
        "mm.vma_lock",
        "\"rwsem\"",
        "logical cpus",
    ] {
        assert!(dom.contains(text), "the page does not show {text:?}");
    }

    // And it is a picture, not a blank page.
    let shot = d.path("shot.png");
    browse(
        &d.0,
        &page,
        &[
            "--window-size=1280,1600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let (w, h, channels, px) = decode_png(&shot);
    assert_eq!((w, h), (1280, 1600));
    let (non_white, colours) = ink(channels, &px);
    assert!(non_white > 30_000, "{non_white} non-white pixels");
    assert!(colours > 100, "{colours} colours");
}

#[test]
fn report_of_an_experiment_takes_its_labels_and_says_what_it_is() {
    let d = Dir::new("report-exp");
    let db = d.db();
    let store = Store::open(&db).unwrap();
    let samples = |v: f64| {
        [1u32, 2]
            .iter()
            .map(|&t| {
                (
                    SampleKey {
                        mode: "threads".into(),
                        tasks: t,
                        metric: "faults/sec".into(),
                        higher_is_better: true,
                    },
                    0,
                    vec![v * f64::from(t), v * f64::from(t) * 1.02],
                )
            })
            .collect::<Vec<_>>()
    };
    for (label, origin, machine, v) in [
        ("mm-unstable-20230210", Origin::Measured, None, 100.0),
        ("pvl-v2", Origin::Measured, None, 90.0),
        ("pvl-v2@big", Origin::Projected, Some("big"), 80.0),
    ] {
        store
            .insert_run(&RunData {
                meta: RunMeta {
                    label: label.into(),
                    workload: "pft".into(),
                    target: "engine".into(),
                    origin,
                    profile: None,
                    profile_toml: None,
                    host_json: None,
                    machine: machine.map(str::to_string),
                    experiment: Some("pft-pvl-2023".into()),
                    pagelab_version: "0.1.0".into(),
                    command: "test".into(),
                },
                status: Status::Complete,
                samples: samples(v),
            })
            .unwrap();
    }
    drop(store);
    let out = d.path("r");
    ok(
        &db,
        &["report", "pft-pvl-2023", "--out", out.to_str().unwrap()],
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<title>pagelab report: pft-pvl-2023</title>"));
    assert!(html.contains("Experiment <strong>pft-pvl-2023</strong>"));
    // Its profiles first (the baseline), then the projector's label stored for it.
    assert!(html.contains("<strong id=\"baseline\">mm-unstable-20230210</strong>"));
    assert!(html.contains("pvl-v2@big"));
    assert!(html.contains("<h2>Projected for big</h2>"));
    // t-test, the experiment's rule.
    assert!(html.contains("t-test"));

    // Bad input: one line, nothing written.
    let file = d.path("a-file");
    std::fs::write(&file, "x").unwrap();
    fails(
        &db,
        &["report", "pft-pvl-2023", "--out", file.to_str().unwrap()],
        "is not a directory",
    );
    let fresh = d.path("fresh");
    fails(
        &db,
        &["report", "lameter-2005", "--out", fresh.to_str().unwrap()],
        "no run of experiment lameter-2005 is stored",
    );
    fails(
        &db,
        &["report", "nosuch", "--out", fresh.to_str().unwrap()],
        "unknown label `nosuch`",
    );
    fails(
        &db,
        &["report", "--out", fresh.to_str().unwrap()],
        "nothing to report",
    );
    assert!(!fresh.exists(), "a failed report created its directory");
}

/// The real projector's rows (`pagelab project`, labels `<profile>@<machine>`) next to the
/// same profiles measured here: the experiment (given by path) stands for both, the projected
/// section names the machine, and the projected labels are compared among themselves.
#[test]
fn report_and_plot_a_real_projection_beside_measured_runs() {
    let d = Dir::new("report-proj");
    let db = d.db();
    // pft-pvl-2023, made small.
    let exp = d.path("tiny-pvl.toml");
    std::fs::write(
        &exp,
        "description = \"tiny\"\nsource = \"a test\"\nworkload = \"pft\"\n\
         profiles = [\"mm-unstable-20230210\", \"pvl-v2\"]\nmodes = [\"threads\"]\n\
         tasks = \"1,2\"\nsamples = 3\nsize = \"32M\"\nsignificance = \"ttest\"\n",
    )
    .unwrap();
    let exp = exp.to_str().unwrap();
    ok(&db, &["reproduce", exp]);
    ok(
        &db,
        &[
            "project",
            "--machine",
            "broadwell-2s-44c",
            "--experiment",
            exp,
            "--tasks",
            "1,4",
            "--samples",
            "2",
        ],
    );
    let out = d.path("r");
    ok(&db, &["report", exp, "--out", out.to_str().unwrap()]);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<title>pagelab report: tiny-pvl</title>"));
    assert!(html.contains("<h2>Measured</h2>"));
    assert!(html.contains("<h2>Projected for broadwell-2s-44c</h2>"));
    assert!(html.contains("pvl-v2@broadwell-2s-44c"));
    assert!(html.contains(
        "The baseline mm-unstable-20230210 has no projected for broadwell-2s-44c results"
    ));

    let svg = d.path("change.svg");
    ok(
        &db,
        &[
            "plot",
            exp,
            "--kind",
            "change",
            "--metric",
            "faults/sec",
            "--out",
            svg.to_str().unwrap(),
        ],
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("pvl-v2 (measured)"), "{svg}");
    assert!(svg.contains(
        "pvl-v2@broadwell-2s-44c (projected for broadwell-2s-44c, against mm-unstable-20230210@broadwell-2s-44c)"
    ));
}

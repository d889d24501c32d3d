//! `pagelab export` is safe: `--out` never overwrites the results store or any other SQLite
//! database, and a CSV export opened in a spreadsheet evaluates nothing, yet imports back as
//! it was.

mod common;

use common::{Dir, fails, fails_untouched, ok};

/// A store with one imported run whose label, workload and metric start with formula
/// characters.
fn formula_store(d: &Dir) -> std::path::PathBuf {
    let db = d.db();
    let src = d.path("src.csv");
    std::fs::write(
        &src,
        "tasks,value,metric,higher_is_better\n1,5,-latency,false\n1,6,-latency,false\n2,7,-latency,false\n",
    )
    .unwrap();
    ok(
        &db,
        &[
            "import",
            src.to_str().unwrap(),
            "--label",
            "=1+1",
            "--workload",
            "@wl",
        ],
    );
    db
}

#[test]
fn export_out_refuses_the_store_and_any_database() {
    let d = Dir::new("export-refuse");
    let db = formula_store(&d);
    let before = ok(&db, &["export", "--format", "json"]);
    // The store itself, by its own name and by another one.
    fails_untouched(
        &db,
        &["export", "--out", db.to_str().unwrap()],
        "results store in use",
    );
    std::fs::create_dir(d.path("sub")).unwrap();
    let roundabout = d.path("sub/../results.db");
    fails_untouched(
        &db,
        &["export", "--out", roundabout.to_str().unwrap()],
        "results store in use",
    );
    // Another store is a database too.
    let other = d.path("other.db");
    std::fs::copy(&db, &other).unwrap();
    let other_bytes = std::fs::read(&other).unwrap();
    fails(
        &db,
        &["export", "--out", other.to_str().unwrap()],
        "is an SQLite database",
    );
    assert_eq!(std::fs::read(&other).unwrap(), other_bytes);
    assert_eq!(ok(&db, &["export", "--format", "json"]), before);
    // A bad format is refused before any file is made.
    let out = d.path("x.txt");
    fails(
        &db,
        &["export", "--format", "xml", "--out", out.to_str().unwrap()],
        "invalid value 'xml' for '--format <FORMAT>' [possible values: csv, json]",
    );
    assert!(!out.exists());
    // An ordinary file is replaced whole.
    std::fs::write(&out, "old contents that are longer than nothing").unwrap();
    ok(&db, &["export", "--out", out.to_str().unwrap()]);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("run_id,label,"), "{text}");
    assert!(!text.contains("old contents"), "{text}");
    let names: Vec<String> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".pagelab-out-")),
        "no temporary file is left: {names:?}"
    );
}

#[test]
fn csv_exports_quote_formulas_and_import_back() {
    let d = Dir::new("export-formula");
    let db = formula_store(&d);
    let text = ok(&db, &["export"]);
    let mut rows = text.lines();
    assert_eq!(
        rows.next(),
        Some(
            "run_id,label,workload,origin,status,mode,tasks,metric,higher_is_better,repeat,seq,value"
        )
    );
    for row in rows {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells[1], "'=1+1", "{row}");
        assert_eq!(cells[2], "'@wl", "{row}");
        assert_eq!(cells[7], "'-latency", "{row}");
        // No cell starts with a character a spreadsheet evaluates.
        for c in &cells[1..] {
            assert!(!c.starts_with(['=', '+', '@', '\t', '\r']), "{row}");
            assert!(!c.starts_with('-') || c.parse::<f64>().is_ok(), "{row}");
        }
    }
    // compare's CSV is quoted the same way.
    let cmp = ok(&db, &["compare", "=1+1", "--format", "csv"]);
    assert!(cmp.contains("'@wl,threads,Min,'-latency,1,'=1+1,"), "{cmp}");

    // Imported again, the workload and metric are the original ones, and the label cell
    // names the original label.
    let path = d.path("export.csv");
    ok(&db, &["export", "--out", path.to_str().unwrap()]);
    ok(&db, &["import", path.to_str().unwrap(), "--label", "again"]);
    let runs: serde_json::Value = serde_json::from_str(&ok(&db, &["runs", "--json"])).unwrap();
    assert_eq!(runs[1]["meta"]["workload"], "@wl");
    let json: serde_json::Value = serde_json::from_str(&ok(
        &db,
        &["export", "--label", "again", "--format", "json"],
    ))
    .unwrap();
    for s in json.as_array().unwrap() {
        assert_eq!(s["key"]["metric"], "-latency");
        assert_eq!(s["key"]["higher_is_better"], false);
    }
    let cmp = ok(&db, &["compare", "=1+1", "again"]);
    assert!(cmp.contains("Amean     -latency-2"), "{cmp}");
}

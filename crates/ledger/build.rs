// The migrations and definitions in sql/ are compiled into the binary and
// the tests; without this, editing one would leave stale copies.
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut entries = String::from("pub static DEFINITIONS: &[Definition] = &[\n");
    for kind in ["functions", "views"] {
        let folder = root.join(kind);
        println!("cargo:rerun-if-changed={}", folder.display());
        let mut files: Vec<_> = std::fs::read_dir(&folder)
            .unwrap_or_else(|error| panic!("reading {}: {error}", folder.display()))
            .map(|entry| entry.expect("a readable directory entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            entries.push_str(&format!(
                "    Definition {{ file: {:?}, sql: include_str!({:?}) }},\n",
                format!("{kind}/{name}"),
                path.display().to_string()
            ));
        }
    }
    entries.push_str("];\n");
    let out =
        Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR set by cargo")).join("definitions.rs");
    std::fs::write(out, entries).expect("writing the definitions' list");
}

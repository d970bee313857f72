// The migrations in sql/ are compiled into the binary and the tests by
// `sqlx::migrate!`; without this, editing one would leave stale copies.
fn main() {
    println!("cargo:rerun-if-changed=sql");
}

//! The deployment files stay valid and match the README: the compose file parses
//! (`docker-compose config`, no engine needed), and the image is built with the
//! README's own build command.

use std::path::Path;
use std::process::Command;

/// The README's build command, as the Dockerfile must run it.
const BUILD_COMMAND: &str = "cargo build --release --locked -p outbox-relay --bin outbox-relay";

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn the_compose_file_is_valid() {
    let output = Command::new("docker-compose")
        .args(["--file", "docker-compose.yml", "config", "--quiet"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("run docker-compose ({e}); scripts/stack up installs Debian's docker-compose"));
    assert!(output.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn the_image_is_built_with_the_readmes_build_command() {
    assert!(repo_file("README.md").contains(BUILD_COMMAND), "the README gives the build command");
    let dockerfile = repo_file("Dockerfile");
    assert!(
        dockerfile.lines().any(|line| line.trim() == format!("RUN {BUILD_COMMAND}")),
        "the Dockerfile's build stage runs the README's build command:\n{dockerfile}"
    );
    for line in ["USER relay", "STOPSIGNAL SIGTERM", "VOLUME /var/lib/outbox-relay"] {
        assert!(dockerfile.contains(line), "the image has `{line}`");
    }
    assert!(dockerfile.contains("/readyz"), "the image's health check is /readyz");
}

//! Runs an external program with JSON on stdin, bounded by a timeout; the
//! child is killed when the time is up (or the caller gives up).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// Most of a program's output we keep: enough for any sane answer.
const STDOUT_CAP: u64 = 1024 * 1024;
const STDERR_CAP: u64 = 8 * 1024;

#[derive(Debug)]
pub struct Finished {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Finished {
    /// The first line of stderr, for a one-line error.
    pub fn stderr_line(&self) -> String {
        let line = self
            .stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        crate::text::truncate(&crate::text::sanitize_line(line.trim()), 200)
    }

    pub fn status_text(&self) -> String {
        match self.code {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start {program}: {message}")]
    Spawn { program: String, message: String },
    #[error("{program} gave no answer within {ms} ms (killed)")]
    Timeout { program: String, ms: u128 },
    #[error("talking to {program}: {message}")]
    Io { program: String, message: String },
}

pub async fn run(
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    input: &[u8],
    timeout: Duration,
) -> Result<Finished, RunError> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().map_err(|error| RunError::Spawn {
        program: program.to_string(),
        message: error.to_string(),
    })?;
    let io_error = |error: std::io::Error| RunError::Io {
        program: program.to_string(),
        message: error.to_string(),
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(RunError::Io {
            program: program.to_string(),
            message: "no pipes to the child".to_string(),
        });
    };
    let talk = async {
        let write = async {
            // A program that exits without reading its input is not an error.
            let _ = stdin.write_all(input).await;
            drop(stdin);
            Ok::<(), std::io::Error>(())
        };
        let read_out = read_capped(stdout, STDOUT_CAP);
        let read_err = read_capped(stderr, STDERR_CAP);
        let ((), out, err) = tokio::try_join!(write, read_out, read_err)?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>(Finished {
            success: status.success(),
            code: status.code(),
            stdout: out,
            stderr: String::from_utf8_lossy(&err).into_owned(),
        })
    };
    match tokio::time::timeout(timeout, talk).await {
        Ok(result) => result.map_err(io_error),
        // Dropping the future drops the child, which kill_on_drop kills.
        Err(_) => Err(RunError::Timeout {
            program: program.to_string(),
            ms: timeout.as_millis(),
        }),
    }
}

/// Keeps the first `cap` bytes and drains the rest: with the pipe closed (or
/// left full) a chatty child would die of SIGPIPE (or block) before answering.
async fn read_capped(
    reader: impl tokio::io::AsyncRead + Unpin,
    cap: u64,
) -> std::io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut capped = reader.take(cap);
    capped.read_to_end(&mut buffer).await?;
    tokio::io::copy(&mut capped.into_inner(), &mut tokio::io::sink()).await?;
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn echoes_and_reports_failures() {
        let done = run("/bin/cat", &[], &[], b"{\"a\":1}", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(done.success);
        assert_eq!(done.stdout, b"{\"a\":1}");

        let args = vec![
            "-c".to_string(),
            "echo 'bad \x1b[31m thing' >&2; exit 3".to_string(),
        ];
        let done = run("/bin/sh", &args, &[], b"", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!done.success);
        assert_eq!(done.status_text(), "exit status 3");
        assert!(!done.stderr_line().contains('\x1b'));
    }

    #[tokio::test]
    async fn output_past_the_caps_is_drained_so_the_program_finishes() {
        // ~200 KB on stderr, written by the shell itself, before its answer.
        let script = r#"i=0
while [ $i -lt 2000 ]; do printf '%0100d\n' 0 >&2; i=$((i + 1)); done
echo '{"ok":true}'"#;
        let args = vec!["-c".to_string(), script.to_string()];
        let started = std::time::Instant::now();
        let done = run("/bin/sh", &args, &[], b"", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(done.success, "{}", done.status_text());
        assert_eq!(done.stdout, b"{\"ok\":true}\n");
        assert_eq!(done.stderr.len() as u64, STDERR_CAP);
    }

    #[tokio::test]
    async fn a_hanging_program_is_bounded() {
        let args = vec!["30".to_string()];
        let started = std::time::Instant::now();
        let error = run("/bin/sleep", &args, &[], b"", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(error, RunError::Timeout { .. }));
        assert!(started.elapsed() < Duration::from_secs(5));
        let error = run(
            "/nonexistent/program",
            &[],
            &[],
            b"",
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, RunError::Spawn { .. }));
    }
}

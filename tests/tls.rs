//! TLS to the database against real servers. Each test that needs TLS starts a
//! MariaDB of its own that accepts only TLS connections (`require_secure_transport`),
//! with a CA and certificates made here by the openssl command, and stops it when
//! the test ends (also on a panic). The server certificate names `db.internal` and
//! `localhost`, not 127.0.0.1, so host-name checking is visible: `verify_identity`
//! passes by `localhost` and fails by 127.0.0.1, `verify_ca` passes by either.
//! The stack's MariaDB offers no TLS: `required` against it must fail by name.
#![recursion_limit = "512"]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, unique, Stack, TEST_TOPIC};
use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::{OutboxTable, RowStatus};
use outbox_relay::config::{DbUrl, TlsConfig, TlsMode};
use outbox_relay::db::{self, DbError};
use outbox_test_support::rows::{insert_sql, Row};

/// The password of the test server's relay user.
const PASSWORD: &str = "tls-secret";
/// The RocketMQ ACL secret key the relay signs with.
const MQ_SECRET: &str = "mq-acl-secret";

/// A CA, a second unrelated CA, and certificates signed by the first, in one directory.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn make(dir: &Path) -> Self {
        let certs = Self { dir: dir.to_owned() };
        let subject_ca = "/CN=outbox-relay test CA";
        certs.self_signed_ca("ca", subject_ca);
        certs.self_signed_ca("other-ca", "/CN=an unrelated CA");
        certs.signed(
            "server",
            "/CN=db.internal",
            "subjectAltName=DNS:db.internal,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        certs.signed("client", "/CN=relay-client", "extendedKeyUsage=clientAuth\n");
        certs
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn self_signed_ca(&self, name: &str, subject: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    /// `name.pem` and `name.key`, signed by `ca` with the extensions in `extensions`.
    fn signed(&self, name: &str, subject: &str, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.file(&ext),
            format!("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"),
        )
        .expect("write the extensions file");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl").args(args).current_dir(&self.dir).output().expect("run openssl");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

/// A directory under the temp directory, removed on drop (also when a test panics
/// while the server is still being set up).
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A MariaDB that accepts only TLS connections over TCP, in a temp directory of its
/// own; killed and removed on drop.
struct TlsServer {
    child: Child,
    dir: TempDir,
    port: u16,
    certs: Certs,
}

impl TlsServer {
    /// Makes the certificates, initialises a datadir, starts the server with its
    /// binlog on (so the relay can tail it) and waits until it answers.
    fn start() -> Self {
        let dir = TempDir(std::env::temp_dir().join(unique("tls-db")));
        for sub in ["binlog", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create the server directory");
        }
        let certs = Certs::make(&dir);
        // Its own temporary directory, and one initialisation at a time: two at once
        // sharing /tmp have been seen to trip over each other's temporary tables.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let installing = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        run(Command::new("mariadb-install-db").args([
            "--no-defaults",
            "--user=root",
            &format!("--datadir={}", dir.join("data").display()),
            &format!("--tmpdir={}", dir.join("tmp").display()),
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]));
        drop(installing);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let path = |name: &str| dir.join(name).display().to_string();
        let child = Command::new("mariadbd")
            .args([
                "--no-defaults".to_owned(),
                "--user=root".to_owned(),
                format!("--datadir={}", path("data")),
                format!("--socket={}", path("mariadbd.sock")),
                format!("--pid-file={}", path("mariadbd.pid")),
                format!("--log-error={}", path("error.log")),
                format!("--tmpdir={}", path("tmp")),
                format!("--port={port}"),
                "--bind-address=127.0.0.1".to_owned(),
                format!("--log-bin={}", path("binlog/mariadb-bin")),
                "--binlog-format=ROW".to_owned(),
                "--binlog-row-image=FULL".to_owned(),
                "--log-slave-updates=ON".to_owned(),
                "--binlog-expire-logs-seconds=86400".to_owned(),
                "--server-id=77".to_owned(),
                "--innodb-buffer-pool-size=64M".to_owned(),
                "--innodb-log-file-size=48M".to_owned(),
                format!("--ssl-ca={}", certs.file("ca.pem").display()),
                format!("--ssl-cert={}", certs.file("server.pem").display()),
                format!("--ssl-key={}", certs.file("server.key").display()),
                "--require-secure-transport=ON".to_owned(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        let mut server = Self { child, dir, port, certs };
        server.wait_until_it_answers(Duration::from_secs(60));
        server.root_sql(&format!(
            "CREATE DATABASE app;
             CREATE USER 'relay'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';
             GRANT ALL PRIVILEGES ON *.* TO 'relay'@'127.0.0.1';
             CREATE USER 'x509'@'127.0.0.1' IDENTIFIED BY 'x509-secret' REQUIRE X509;
             GRANT SELECT ON app.* TO 'x509'@'127.0.0.1';"
        ));
        let have_ssl = server.root_sql("SELECT @@have_ssl");
        assert_eq!(have_ssl.trim(), "YES", "the test server must have TLS on; read {}", server.error_log());
        server
    }

    /// Polls `mariadb-admin ping` over the socket until it succeeds; fails at once
    /// when the server exits, and after `deadline`.
    fn wait_until_it_answers(&mut self, deadline: Duration) {
        let until = std::time::Instant::now() + deadline;
        loop {
            let ping = Command::new("mariadb-admin")
                .args(["--no-defaults", "-uroot", "-S", &self.socket(), "ping"])
                .output()
                .expect("run mariadb-admin");
            if ping.status.success() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("mariadbd exited ({status}) before it answered:\n{}", self.error_log());
            }
            assert!(
                std::time::Instant::now() < until,
                "mariadbd did not answer within {deadline:?}:\n{}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn socket(&self) -> String {
        self.dir.join("mariadbd.sock").display().to_string()
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// Runs `sql` as root over the Unix socket (local, so allowed without TLS).
    fn root_sql(&self, sql: &str) -> String {
        let output =
            run(Command::new("mariadb").args(["--no-defaults", "-uroot", "-S", &self.socket(), "-N", "-e", sql]));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The relay user's URL by `host` (127.0.0.1 or localhost).
    fn url(&self, host: &str) -> DbUrl {
        DbUrl::new(format!("mysql://relay:{PASSWORD}@{host}:{}/app", self.port))
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn tls(&self, mode: TlsMode, ca: Option<&str>) -> TlsConfig {
        TlsConfig { mode, ca_file: ca.map(|name| self.certs.file(name)), cert_file: None, key_file: None }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` to success, or panics with what it printed.
fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The TLS cipher of one pooled connection ("" when the connection is plaintext).
async fn cipher(pool: &Pool) -> String {
    let mut conn = pool.get_conn().await.expect("a connection");
    let row: Option<(String, String)> = conn.query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'").await.expect("query");
    row.map(|(_, cipher)| cipher).unwrap_or_default()
}

/// Connects like the relay does; the error's message on failure.
async fn connect(url: &DbUrl, tls: &TlsConfig) -> Result<Pool, String> {
    db::connect_with("primary", url, tls, 1, &[]).await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_only_server_takes_each_mode_as_documented() {
    let server = TlsServer::start();
    let by_ip = server.url("127.0.0.1");

    // required: encrypted, no certificate checks; a query works.
    let pool = connect(&by_ip, &server.tls(TlsMode::Required, None)).await.expect("required connects");
    assert!(!cipher(&pool).await.is_empty(), "the connection is encrypted");
    let one: Option<u8> = pool.get_conn().await.expect("conn").query_first("SELECT 1").await.expect("SELECT 1");
    assert_eq!(one, Some(1));
    pool.disconnect().await.ok();

    // preferred: TLS when offered (this server offers it).
    let pool = connect(&by_ip, &server.tls(TlsMode::Preferred, None)).await.expect("preferred connects");
    assert!(!cipher(&pool).await.is_empty(), "preferred uses TLS when the server offers it");
    pool.disconnect().await.ok();

    // verify_ca with the right CA: the chain verifies, the host name (127.0.0.1, not
    // in the certificate) is not checked.
    let pool = connect(&by_ip, &server.tls(TlsMode::VerifyCa, Some("ca.pem"))).await.expect("verify_ca connects");
    assert!(!cipher(&pool).await.is_empty());
    pool.disconnect().await.ok();

    // verify_identity: passes by a name the certificate holds, fails by another.
    let by_name = server.url("localhost");
    let pool =
        connect(&by_name, &server.tls(TlsMode::VerifyIdentity, Some("ca.pem"))).await.expect("verify_identity by name");
    assert!(!cipher(&pool).await.is_empty());
    pool.disconnect().await.ok();
    let error = connect(&by_ip, &server.tls(TlsMode::VerifyIdentity, Some("ca.pem"))).await.err().expect("refused");
    assert!(error.contains("not issued for the host") && error.contains("verify_ca"), "{error}");

    // disabled: the server refuses plaintext; the error names the address and the fix.
    let error = connect(&by_ip, &server.tls(TlsMode::Disabled, None)).await.err().expect("plaintext is refused");
    assert!(error.contains(&server.address()), "{error}");
    assert!(error.contains("accepts only TLS") && error.contains("primary.tls.mode = \"required\""), "{error}");

    // verify_ca with a CA that did not sign the server's certificate: refused, naming the file.
    let wrong_ca = server.certs.file("other-ca.pem");
    let error = connect(&by_ip, &server.tls(TlsMode::VerifyCa, Some("other-ca.pem"))).await.err().expect("refused");
    assert!(error.contains(&wrong_ca.display().to_string()) && error.contains("primary.tls.ca_file"), "{error}");
    assert!(error.contains(&server.address()), "{error}");

    // A CA file that cannot be read: the key and the path.
    let missing = server.dir.join("no-such-ca.pem");
    let tls = TlsConfig { ca_file: Some(missing.clone()), ..server.tls(TlsMode::VerifyCa, None) };
    let error = connect(&by_ip, &tls).await.err().expect("refused");
    assert!(error.contains("primary.tls.ca_file") && error.contains(&missing.display().to_string()), "{error}");

    // A client certificate for a user that requires one (REQUIRE X509).
    let x509 = DbUrl::new(format!("mysql://x509:x509-secret@127.0.0.1:{}/app", server.port));
    let error = connect(&x509, &server.tls(TlsMode::Required, None)).await.err().expect("no client certificate");
    assert!(error.contains("access denied") || error.contains("Access denied"), "{error}");
    let with_identity = TlsConfig {
        cert_file: Some(server.certs.file("client.pem")),
        key_file: Some(server.certs.file("client.key")),
        ..server.tls(TlsMode::VerifyCa, Some("ca.pem"))
    };
    let pool = connect(&x509, &with_identity).await.expect("the client certificate is accepted");
    assert!(!cipher(&pool).await.is_empty());
    pool.disconnect().await.ok();
}

/// `outbox-relay migrate` as an operator runs it: the password from a file, TLS from
/// the environment.
fn migrate(server: &TlsServer, table: &str, env: &[(&str, String)]) -> (Option<i32>, String) {
    let password_file = server.dir.join("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("write the password file");
    let config = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/relay.toml"));
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .arg("migrate")
        .arg("--config")
        .arg(config)
        .env("NO_COLOR", "1")
        .env("OUTBOX_RELAY__MODE", "poll")
        .env("OUTBOX_RELAY__PRIMARY__URL", format!("mysql://relay@127.0.0.1:{}/app", server.port))
        .env("OUTBOX_RELAY__PRIMARY__PASSWORD_FILE", &password_file)
        .env("OUTBOX_RELAY__OUTBOX__TABLE", table)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run outbox-relay migrate");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!text.contains(PASSWORD), "the password appeared in the output: {text}");
    (output.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_binary_tails_and_writes_over_tls_with_its_password_from_a_file() {
    let server = TlsServer::start();
    let stack = Stack::from_env();
    let table = unique("outbox");
    let ca = server.certs.file("ca.pem").display().to_string();
    let wrong_ca = server.certs.file("other-ca.pem").display().to_string();

    // The binary refuses plaintext and a wrong CA with the fix, exit 4 (environment).
    let (code, text) = migrate(&server, &table, &[("OUTBOX_RELAY__PRIMARY__TLS__MODE", "disabled".into())]);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains(&server.address()) && text.contains("primary.tls.mode"), "{text}");
    let migrate_verifying = |ca_file: &str| {
        let env = [
            ("OUTBOX_RELAY__PRIMARY__TLS__MODE", "verify_ca".to_owned()),
            ("OUTBOX_RELAY__PRIMARY__TLS__CA_FILE", ca_file.to_owned()),
        ];
        migrate(&server, &table, &env)
    };
    let (code, text) = migrate_verifying(&wrong_ca);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains(&wrong_ca), "{text}");

    // With the right CA it creates the tables.
    let (code, text) = migrate_verifying(&ca);
    assert_eq!(code, Some(0), "{text}");

    // The relay tails the server's binlog (verify_identity by name) and writes
    // statuses (verify_ca by address); a grace longer than the test leaves the row to
    // the binlog path. Its producer signs with ACL credentials (the stack's broker
    // does not enforce ACL: this shows signing does not get in the way of sends).
    let mq_secret = server.dir.join("mq-secret");
    std::fs::write(&mq_secret, format!("{MQ_SECRET}\n")).expect("write the secret key file");
    let source_url = format!("mysql://relay:{PASSWORD}@localhost:{}/app", server.port);
    let options = RelayOptions::new(&table)
        .env("OUTBOX_RELAY__SOURCE__URL", source_url)
        .env("OUTBOX_RELAY__SOURCE__TLS__MODE", "verify_identity")
        .env("OUTBOX_RELAY__SOURCE__TLS__CA_FILE", &ca)
        .env("OUTBOX_RELAY__PRIMARY__URL", format!("mysql://relay@127.0.0.1:{}/app", server.port))
        .env("OUTBOX_RELAY__PRIMARY__PASSWORD_FILE", server.dir.join("password").display())
        .env("OUTBOX_RELAY__PRIMARY__TLS__MODE", "verify_ca")
        .env("OUTBOX_RELAY__PRIMARY__TLS__CA_FILE", &ca)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 3_600_000)
        .env("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "outbox-relay-test")
        .env("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY_FILE", mq_secret.display());
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;

    let pool = db::connect_with("primary", &server.url("127.0.0.1"), &server.tls(TlsMode::Required, None), 2, &[])
        .await
        .expect("a test pool on the TLS server");
    let outbox = OutboxTable { schema: "app".to_owned(), table: table.clone() };
    let event_id = unique("tls-event");
    let row = Row { event_id: event_id.clone(), biz_key: "tls".into(), topic: TEST_TOPIC.into(), payload: "{}".into() };
    let (sql, params) = insert_sql(&outbox, [row]);
    pool.get_conn().await.expect("conn").exec_drop(sql, params).await.expect("insert the outbox row");
    let select = format!("SELECT status FROM {} WHERE event_id = ?", outbox.qualified());
    eventually("the row to be SENT through the TLS connections", Duration::from_secs(60), || {
        let (pool, select, event_id) = (pool.clone(), select.clone(), event_id.clone());
        async move {
            let status: Option<u8> = pool.get_conn().await.ok()?.exec_first(select, (event_id,)).await.ok()?;
            (status == Some(RowStatus::Sent.code())).then_some(())
        }
    })
    .await;
    assert_eq!(relay.stop(), Some(0));
    let log = relay.log_text();
    assert!(!log.contains(PASSWORD), "the password appeared in the relay's log");
    assert!(!log.contains(MQ_SECRET), "the ACL secret key appeared in the relay's log");
    pool.disconnect().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_against_the_stack_without_tls_names_the_address_and_preferred_falls_back() {
    let stack = Stack::from_env();
    let url = DbUrl::new(&stack.writer_url);
    let required = TlsConfig { mode: TlsMode::Required, ..TlsConfig::default() };
    let error = db::connect_with("primary", &url, &required, 1, &[]).await.err().expect("required is refused");
    assert!(matches!(error, DbError::TlsUnavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(url.address()) && message.contains("does not offer TLS"), "{message}");
    assert!(message.contains("primary.tls.mode = \"preferred\""), "{message}");
    assert!(!message.contains("writer-secret"), "password leaked: {message}");

    let pool = db::connect_with("primary", &url, &TlsConfig::default(), 1, &[]).await.expect("preferred falls back");
    assert_eq!(cipher(&pool).await, "", "plaintext, as the server offers no TLS");
    pool.disconnect().await.ok();
}

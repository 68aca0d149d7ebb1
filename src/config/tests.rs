//! Config parsing and validation: the example file loads, and each kind of mistake
//! produces an error that names the key.

use super::*;

const EXAMPLE: &str = include_str!("../../config/relay.toml");

fn load_with(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load_from_str(text, "test.toml", env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

fn error_of(text: &str, env: &[(&str, &str)]) -> String {
    match load_with(text, env) {
        Ok(_) => panic!("expected a config error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn example_config_loads_with_documented_values() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.mode, Mode::Binlog);
    assert_eq!(config.source.as_ref().map(|s| s.server_id), Some(4242));
    assert_eq!(config.sweep.interval(Mode::Binlog), std::time::Duration::from_secs(30));
    assert_eq!(config.rocketmq.topics["t-order-event"].queue_count, 8);
    assert_eq!(config.retry.max_retry, 8);
    assert_eq!(config.outbox_schema(), Some("app"));
    assert_eq!(config.runtime.worker_threads, 1);
}

#[test]
fn one_worker_thread_unless_set() {
    let without_runtime = EXAMPLE.replace("[runtime]\nworker_threads = 1\n", "");
    assert_ne!(without_runtime, EXAMPLE, "the example sets runtime.worker_threads");
    let config = load_with(&without_runtime, &[]).expect("the runtime section is optional");
    assert_eq!(config.runtime.worker_threads, 1);
    let config = load_with(EXAMPLE, &[("OUTBOX_RELAY__RUNTIME__WORKER_THREADS", "4")]).expect("4 is valid");
    assert_eq!(config.runtime.worker_threads, 4);
}

#[test]
fn zero_worker_threads_is_refused_with_the_setting_named() {
    let error = error_of(EXAMPLE, &[("OUTBOX_RELAY__RUNTIME__WORKER_THREADS", "0")]);
    assert!(error.contains("runtime.worker_threads") && error.contains("at least 1"), "{error}");
}

#[test]
fn env_override_replaces_file_values_with_typed_values() {
    let config = load_with(
        EXAMPLE,
        &[
            ("OUTBOX_RELAY__SOURCE__SERVER_ID", "77"),
            ("OUTBOX_RELAY__PRIMARY__URL", "mysql://w:pw@db.example:3306/shop"),
        ],
    )
    .expect("overrides are valid");
    assert_eq!(config.source.as_ref().map(|s| s.server_id), Some(77));
    assert_eq!(config.primary.url.address(), "db.example:3306");
    assert_eq!(config.outbox_schema(), Some("shop"));
}

#[test]
fn env_override_of_digits_stays_a_string_where_the_key_wants_one() {
    let config = load_with(
        EXAMPLE,
        &[
            ("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "2024"),
            ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", "123456"),
            ("OUTBOX_RELAY__SOURCE__SERVER_ID", "78"),
        ],
    )
    .expect("a password of digits is a string");
    let acl = config.rocketmq.acl().expect("both ACL keys are set");
    assert_eq!((acl.access_key.as_str(), acl.secret_key.expose()), ("2024", "123456"));
    assert_eq!(config.source.as_ref().map(|s| s.server_id), Some(78));
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__SERVER_ID", "seventy")]);
    assert!(message.contains("source.server_id") && message.contains("u32"), "{message}");
}

#[test]
fn missing_key_names_the_section_and_the_field() {
    let text = EXAMPLE.replace("server_id = 4242", "");
    let message = error_of(&text, &[]);
    assert!(message.contains("`source.server_id`") && message.contains("missing"), "{message}");
}

#[test]
fn wrong_type_names_the_key_and_expected_type() {
    let text = EXAMPLE.replace("server_id = 4242", "server_id = \"abc\"");
    let message = error_of(&text, &[]);
    assert!(message.contains("source.server_id") && message.contains("u32"), "{message}");
}

#[test]
fn unknown_key_is_rejected_with_its_name() {
    let text = EXAMPLE.replace("batch_size = 128", "batch_size = 128\nbatchsize = 3");
    let message = error_of(&text, &[]);
    assert!(message.contains("batchsize"), "{message}");
}

#[test]
fn out_of_range_value_names_key_value_and_expectation() {
    let text = EXAMPLE.replace("queue_count = 8", "queue_count = 0");
    let message = error_of(&text, &[]);
    assert!(message.contains("rocketmq.topics.t-order-event.queue_count") && message.contains("got 0"), "{message}");
}

#[test]
fn syntax_error_names_the_file_and_line() {
    let message = error_of("mode = \n[source", &[]);
    assert!(message.contains("test.toml") && message.contains("line"), "{message}");
}

#[test]
fn bad_url_is_rejected_without_printing_the_password() {
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__URL", "postgres://w:topsecret@db:5432/app")]);
    assert!(message.contains("primary.url"), "{message}");
    assert!(!message.contains("topsecret"), "password leaked: {message}");
}

#[test]
fn config_dump_and_debug_redact_passwords() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    let dump = toml::to_string(&config).expect("config serialises");
    let debug = format!("{config:?}");
    for text in [&dump, &debug] {
        assert!(!text.contains("repl-secret") && !text.contains("writer-secret"), "password leaked: {text}");
        assert!(text.contains("outbox_repl:***@127.0.0.1:13307"), "{text}");
    }
}

#[test]
fn malformed_env_override_names_the_variable() {
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE____URL", "x")]);
    assert!(message.contains("OUTBOX_RELAY__SOURCE____URL"), "{message}");
}

#[test]
fn db_url_parts() {
    let url = DbUrl::new("mysql://u:p@h:1/db?x=1");
    assert_eq!(url.address(), "h:1");
    assert_eq!(url.database(), Some("db"));
    assert_eq!(url.redacted(), "mysql://u:***@h:1/db?x=1");
    assert_eq!(DbUrl::new("mysql://h:1/").database(), None);
    assert_eq!(url.user(), Some("u"));
    assert_eq!(DbUrl::new("mysql://only@h:1/db").user(), Some("only"));
    assert_eq!(DbUrl::new("mysql://h:1/db").user(), None);
}

#[test]
fn a_budget_below_the_batch_size_names_both_keys() {
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", "64")]);
    assert!(message.contains("lanes.max_in_flight") && message.contains("got 64"), "{message}");
    assert!(message.contains("at least lanes.batch_size (128), or a lanes.batch_size of at most 64"), "{message}");
    let smaller_batches = [("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT", "64"), ("OUTBOX_RELAY__LANES__BATCH_SIZE", "64")];
    assert!(load_with(EXAMPLE, &smaller_batches).is_ok());
}

#[test]
fn the_byte_budget_must_hold_the_largest_message() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.lanes.max_in_flight_bytes, 256 * 1024 * 1024);
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__LANES__MAX_IN_FLIGHT_BYTES", "1000")]);
    assert!(message.contains("lanes.max_in_flight_bytes"), "{message}");
}

#[test]
fn poll_mode_needs_no_source_and_sweeps_every_500_ms() {
    let without_source =
        EXAMPLE.split("\n[source]\n").next().unwrap_or_default().replace("mode = \"binlog\"", "mode = \"poll\"")
            + "\n[primary]\n"
            + EXAMPLE.split("\n[primary]\n").nth(1).unwrap_or_default();
    let config = load_with(&without_source, &[]).expect("poll mode without [source] is valid");
    assert!(config.source.is_none());
    assert_eq!(config.sweep.interval(Mode::Poll), std::time::Duration::from_millis(500));
    assert_eq!(config.sweep.batch, 100);
    let message = error_of(&without_source, &[("OUTBOX_RELAY__MODE", "binlog")]);
    assert!(message.contains("`source`") && message.contains("mode = \"poll\""), "{message}");
}

#[test]
fn claim_method_is_auto_unless_set() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.sweep.claim, crate::config::ClaimMethod::Auto);
    let config = load_with(EXAMPLE, &[("OUTBOX_RELAY__SWEEP__CLAIM", "optimistic")]).expect("optimistic is valid");
    assert_eq!(config.sweep.claim, crate::config::ClaimMethod::Optimistic);
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SWEEP__CLAIM", "pessimistic")]);
    assert!(message.contains("sweep.claim") && message.contains("skip_locked"), "{message}");
}

#[test]
fn a_lease_shorter_than_two_send_timeouts_is_refused_naming_both_keys() {
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__LEADER__LEASE_MS", "5000")]);
    assert!(message.contains("leader.lease_ms") && message.contains("rocketmq.send_timeout_ms"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__LEADER__NAME", "x'; DROP TABLE y")]);
    assert!(message.contains("leader.name"), "{message}");
}

#[test]
fn the_allowed_downtime_is_a_day_and_never_zero() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.source.as_ref().map(|s| s.max_downtime_secs), Some(86_400));
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__MAX_DOWNTIME_SECS", "0")]);
    assert!(message.contains("source.max_downtime_secs") && message.contains("got 0"), "{message}");
}

/// A file under the temp directory holding `content`, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(content: &str) -> Self {
        let path = std::env::temp_dir().join(format!("outbox-relay-secret-{}", uuid::Uuid::now_v7().simple()));
        std::fs::write(&path, content).expect("write the secret file");
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn tls_is_preferred_unless_set_and_each_mode_checks_its_files() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.primary.tls.mode, TlsMode::Preferred);
    assert_eq!(config.source.as_ref().map(|s| s.tls.mode), Some(TlsMode::Preferred));
    let config = load_with(
        EXAMPLE,
        &[
            ("OUTBOX_RELAY__SOURCE__TLS__MODE", "verify_identity"),
            ("OUTBOX_RELAY__SOURCE__TLS__CA_FILE", "/etc/ca.pem"),
        ],
    )
    .expect("verify_identity with a CA file is valid");
    let tls = &config.source.as_ref().expect("source").tls;
    assert_eq!(
        (tls.mode, tls.ca_file.as_deref()),
        (TlsMode::VerifyIdentity, Some(std::path::Path::new("/etc/ca.pem")))
    );

    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__TLS__MODE", "verify_ca")]);
    assert!(message.contains("primary.tls.ca_file") && message.contains("verify_ca"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__TLS__MODE", "strict")]);
    assert!(message.contains("primary.tls.mode") && message.contains("verify_identity"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__TLS__CA_FILE", "/etc/ca.pem")]);
    assert!(message.contains("primary.tls.ca_file") && message.contains("preferred"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__TLS__CERT_FILE", "/etc/client.pem")]);
    assert!(message.contains("source.tls.cert_file") && message.contains("source.tls.key_file"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__TLS__KEY_FILE", "/etc/client.key")]);
    assert!(message.contains("source.tls.cert_file") && message.contains("source.tls.key_file"), "{message}");
    let text =
        EXAMPLE.replace("minimal_row_image = true", "minimal_row_image = true\n[primary.tls]\nmode = \"requierd\"");
    let message = error_of(&text, &[]);
    assert!(message.contains("primary.tls.mode") && message.contains("requierd"), "{message}");
}

#[test]
fn a_password_file_replaces_the_url_password_and_stays_secret() {
    let secret = TempFile::new("p@ss:w/rd\n");
    let config = load_with(EXAMPLE, &[("OUTBOX_RELAY__PRIMARY__PASSWORD_FILE", secret.path())])
        .expect("a readable password file is valid");
    let opts = mysql_async::Opts::from_url(config.primary.url.expose()).expect("the URL still parses");
    assert_eq!(opts.pass(), Some("p@ss:w/rd"), "the trailing newline is stripped, the rest kept");
    assert_eq!(opts.user(), Some("outbox_writer"));
    assert_eq!(config.primary.url.address(), "127.0.0.1:13306");
    let dump = toml::to_string(&config).expect("config serialises");
    let debug = format!("{config:?}");
    for text in [&dump, &debug] {
        assert!(!text.contains("p@ss") && !text.contains("p%40ss"), "password leaked: {text}");
    }

    let missing = "/nonexistent/outbox-relay/source-password";
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__PASSWORD_FILE", missing)]);
    assert!(message.contains("source.password_file") && message.contains(missing), "{message}");
    let empty = TempFile::new("\n");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__SOURCE__PASSWORD_FILE", empty.path())]);
    assert!(message.contains("source.password_file") && message.contains("empty"), "{message}");
    let message = error_of(
        EXAMPLE,
        &[
            ("OUTBOX_RELAY__PRIMARY__URL", "mysql://127.0.0.1:13306/app"),
            ("OUTBOX_RELAY__PRIMARY__PASSWORD_FILE", secret.path()),
        ],
    );
    assert!(message.contains("primary.url") && message.contains("user name"), "{message}");
}

#[test]
fn rocketmq_acl_keys_come_in_pairs_and_the_secret_never_shows() {
    let config = load_with(EXAMPLE, &[]).expect("example config is valid");
    assert_eq!(config.rocketmq.acl(), None);

    let secret = TempFile::new("mq-top-secret\r\n");
    let config = load_with(
        EXAMPLE,
        &[("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "relay"), ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY_FILE", secret.path())],
    )
    .expect("an access key with a secret key file is valid");
    let acl = config.rocketmq.acl().expect("ACL credentials");
    assert_eq!((acl.access_key.as_str(), acl.secret_key.expose()), ("relay", "mq-top-secret"));
    let dump = toml::to_string(&config).expect("config serialises");
    for text in [&dump, &format!("{config:?}"), &format!("{acl:?}"), &acl.secret_key.to_string()] {
        assert!(!text.contains("mq-top-secret"), "secret leaked: {text}");
    }

    let config = load_with(
        EXAMPLE,
        &[("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "relay"), ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", "inline-secret")],
    )
    .expect("an inline secret key is valid");
    assert_eq!(config.rocketmq.acl().map(|a| a.secret_key.expose().to_owned()).as_deref(), Some("inline-secret"));

    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "relay")]);
    assert!(message.contains("rocketmq.access_key") && message.contains("rocketmq.secret_key"), "{message}");
    let message = error_of(EXAMPLE, &[("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", "inline-secret")]);
    assert!(message.contains("rocketmq.access_key") && !message.contains("inline-secret"), "{message}");
    let message = error_of(
        EXAMPLE,
        &[
            ("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "relay"),
            ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY", "inline-secret"),
            ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY_FILE", secret.path()),
        ],
    );
    assert!(message.contains("rocketmq.secret_key_file") && !message.contains("inline-secret"), "{message}");
    let missing = "/nonexistent/outbox-relay/mq-secret";
    let message = error_of(
        EXAMPLE,
        &[("OUTBOX_RELAY__ROCKETMQ__ACCESS_KEY", "relay"), ("OUTBOX_RELAY__ROCKETMQ__SECRET_KEY_FILE", missing)],
    );
    assert!(message.contains("rocketmq.secret_key_file") && message.contains(missing), "{message}");
}

#[test]
fn a_password_is_percent_encoded_into_the_url() {
    let url = DbUrl::new("mysql://u:old@h:1/db").with_password("a b/%:@é").expect("a user to attach to");
    assert_eq!(url.redacted(), "mysql://u:***@h:1/db");
    let opts = mysql_async::Opts::from_url(url.expose()).expect("parses");
    assert_eq!(opts.pass(), Some("a b/%:@é"));
    assert_eq!(DbUrl::new("mysql://h:1/db").with_password("x"), None);
}

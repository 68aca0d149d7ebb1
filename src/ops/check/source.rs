//! The source's binlog settings, judged by the verdicts the relay's start uses
//! (`source::binlog::settings`): the report shows every one, the start refuses on
//! the FAILs.

use mysql_async::Pool;

use super::{one_line, Finding, Group};
use crate::config::SourceConfig;
use crate::source::binlog::read_facts;
use crate::source::binlog::settings::{verdicts, Expected};

/// One finding per setting, or one FAIL when the settings cannot be read.
pub(super) async fn findings(pool: &Pool, source: &SourceConfig) -> Vec<Finding> {
    let address = source.url.address();
    let facts = match pool.get_conn().await {
        Ok(mut conn) => read_facts(&mut conn, address).await.map_err(one_line),
        Err(error) => Err(one_line(error)),
    };
    match facts {
        Ok(facts) => verdicts(&facts, &Expected::of(source)),
        Err(error) => vec![Finding::fail(
            Group::Source,
            "settings",
            format!("cannot be read: {error}"),
            "make sure the source answers SHOW GLOBAL VARIABLES for source.url's user, then run the check again",
        )],
    }
}

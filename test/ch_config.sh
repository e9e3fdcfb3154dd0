# test/ch_config.sh — sourced by test/sandbox.sh: writes the local
# ClickHouse endpoint's server configuration into "$SB".
# shellcheck shell=bash

# The endpoint's server configuration, laid out as clickhouse-server's:
# ch_config.xml names the users file (user_directories/users_xml, relative
# to the config's folder), ch_users.xml defines the engine's one user,
# `default` (no password, profile and quota `default`), its roles, and one
# row policy, the way a server gets row policies from users.xml: rows of
# dpwin_policy.policed with id <= 0 are hidden from it.  Admission tests
# (test/t/040_admission.t, test/t/105_least_privilege.t) create that table
# and expect dpwin to refuse it.
#
# The engine runs every session as `default`; the endpoint makes each role
# granted to `default` an HTTP account of that name with the sandbox's
# password, whose statements run with that role only (docs/endpoint.md,
# "Accounts"):
#   $CHUSER (dpwin)       what the built-in `default` may do: everything but
#                         access management (so it may not read
#                         system.row_policies); the tests' own account and
#                         the sandbox's user mapping;
#   dpwin_refresh         exactly the grants docs/admission.md lists for the
#                         dpwin user: SHOW ROW POLICIES, and SELECT, INSERT,
#                         CREATE TABLE, DROP TABLE and ALTER DELETE (which
#                         ATTACH PARTITION ... FROM needs on the generation)
#                         on the target databases (all of them here: tests
#                         create theirs);
#   dpwin_refresh_noshow  the same without SHOW ROW POLICIES: admission then
#                         falls back to the query plan.
write_ch_config() {
	local admin=${CHUSER:-dpwin}
	# The engine library starts with 2 threads for merges and mutations and
	# 2 for scheduling; clickhouse-server's defaults are 16 and 512.  With
	# 2, a mutation (a lightweight DELETE) of a table with many parts waits
	# about 150 ms per part for a thread: take the server's values.
	cat >"$SB/ch_config.xml" <<'EOF'
<clickhouse>
  <background_pool_size>16</background_pool_size>
  <background_schedule_pool_size>512</background_schedule_pool_size>
  <user_directories>
    <users_xml>
      <path>ch_users.xml</path>
    </users_xml>
  </user_directories>
</clickhouse>
EOF
	cat >"$SB/ch_users.xml" <<EOF
<clickhouse>
  <users>
    <default>
      <password></password>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
      <grants>
        <query>GRANT $admin</query>
        <query>GRANT dpwin_refresh</query>
        <query>GRANT dpwin_refresh_noshow</query>
      </grants>
      <databases>
        <dpwin_policy>
          <policed>
            <filter>id &gt; 0</filter>
          </policed>
        </dpwin_policy>
      </databases>
    </default>
  </users>
  <roles>
    <$admin>
      <grants>
        <query>GRANT ALL ON *.*</query>
        <query>REVOKE ACCESS MANAGEMENT ON *.*</query>
      </grants>
    </$admin>
    <dpwin_refresh>
      <grants>
        <query>GRANT SHOW ROW POLICIES ON *.*</query>
        <query>GRANT SELECT, INSERT, CREATE TABLE, DROP TABLE, ALTER DELETE, ALTER UPDATE ON *.*</query>
      </grants>
    </dpwin_refresh>
    <dpwin_refresh_noshow>
      <grants>
        <query>GRANT SELECT, INSERT, CREATE TABLE, DROP TABLE, ALTER DELETE, ALTER UPDATE ON *.*</query>
      </grants>
    </dpwin_refresh_noshow>
  </roles>
  <profiles><default/></profiles>
  <quotas><default/></quotas>
</clickhouse>
EOF
}

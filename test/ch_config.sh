# test/ch_config.sh — sourced by test/sandbox.sh: writes the local
# ClickHouse endpoint's server configuration into "$SB".
# shellcheck shell=bash

# The endpoint's server configuration, laid out as clickhouse-server's:
# ch_config.xml names the users file (user_directories/users_xml, relative
# to the config's folder), ch_users.xml defines the one engine user,
# `default`, exactly as the engine's built-in default (no password, profile
# and quota `default`, no access management) plus one row policy, the way
# a server gets row policies from users.xml: rows of
# dpwin_policy.policed with id <= 0 are hidden from it.  Admission tests
# (test/t/040_admission.t) create that table and expect dpwin to refuse it.
write_ch_config() {
	cat >"$SB/ch_config.xml" <<'EOF'
<clickhouse>
  <user_directories>
    <users_xml>
      <path>ch_users.xml</path>
    </users_xml>
  </user_directories>
</clickhouse>
EOF
	cat >"$SB/ch_users.xml" <<'EOF'
<clickhouse>
  <users>
    <default>
      <password></password>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
      <databases>
        <dpwin_policy>
          <policed>
            <filter>id &gt; 0</filter>
          </policed>
        </dpwin_policy>
      </databases>
    </default>
  </users>
  <profiles><default/></profiles>
  <quotas><default/></quotas>
</clickhouse>
EOF
}


-- The dpwin_clickhouse foreign-data wrapper: server and user mapping
-- options, their validation, and where the password is (not) visible.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dpwin;
CREATE EXTENSION IF NOT EXISTS dpwin_test;
RESET client_min_messages;
\set SHOW_CONTEXT never

-- try(sql): 'ok', or the SQLSTATE and message of the error it raised
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
-- try_hint(sql): the same with the hint
CREATE FUNCTION pg_temp.try_hint(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	h text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
	RETURN SQLSTATE || ': ' || SQLERRM || ' / hint: ' || h;
END
$$;

SELECT fdwname, fdwhandler = 0 AS no_handler, fdwvalidator::regproc
  FROM pg_foreign_data_wrapper WHERE fdwname = 'dpwin_clickhouse';

-- a minimal server, and the defaults dpwin fills in
CREATE SERVER fdw_ch FOREIGN DATA WRAPPER dpwin_clickhouse
	OPTIONS (url 'http://127.0.0.1:8123');
SELECT * FROM dpwin_test.server_conf('fdw_ch');
-- every option; a trailing slash is dropped, durations take units
CREATE SERVER fdw_full FOREIGN DATA WRAPPER dpwin_clickhouse
	OPTIONS (url 'https://ch.example.com:8443/', ca_file '/etc/ssl/certs/ch.pem',
			 verify_peer 'off', connect_timeout '5s', request_timeout '0',
			 settings 'max_threads=4&insert_quorum=2&x=%2F_a.b~-');
SELECT * FROM dpwin_test.server_conf('fdw_full');
-- host forms
SELECT pg_temp.try($$CREATE SERVER fdw_v6 FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://[::1]:8123')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_name FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://clickhouse_1.internal')$$);
SELECT url FROM dpwin_test.server_conf('fdw_v6');
DROP SERVER fdw_v6;
DROP SERVER fdw_name;

-- bad server options: each its own message, naming the value
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse$$);
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', bogus '1')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'ftp://h')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'HTTP://h')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'h:8123')$$);
-- credentials in the url: refused without repeating the url
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://admin:hunter2@h:8123')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://hunter2@h')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:8123/db')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:8123?user=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h#top')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://-h')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h h')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://[::1')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://[zz]:1')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:0')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:65536')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h:80x')$$);
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', ca_file 'certs/ch.pem')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', verify_peer 'maybe')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', connect_timeout '0')$$);
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', connect_timeout '10 parsecs')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', connect_timeout '1e12')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', request_timeout '-1')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings '')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'max_threads')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'Max_Threads=1')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1&&b=2')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1&')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1&a=2')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=x y')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1;b')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=café')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=%4')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=%zz')$$);
SELECT pg_temp.try_hint($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1&password=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'user=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'query=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'database=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'query_id=x')$$);
SELECT pg_temp.try($$CREATE SERVER fdw_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'session_id=x')$$);
-- ALTER SERVER is validated on the resulting option list
SELECT pg_temp.try($$ALTER SERVER fdw_ch OPTIONS (DROP url)$$);
SELECT pg_temp.try($$ALTER SERVER fdw_ch OPTIONS (SET url 'http://h:8123/x')$$);
SELECT pg_temp.try($$ALTER SERVER fdw_ch OPTIONS (ADD request_timeout '10min')$$);
SELECT request_timeout_ms FROM dpwin_test.server_conf('fdw_ch');
-- the wrapper and foreign tables take no options
SELECT pg_temp.try_hint($$ALTER FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h')$$);
SELECT pg_temp.try_hint($$CREATE FOREIGN TABLE fdw_ft (a int) SERVER fdw_ch OPTIONS (table 'x')$$);
SELECT pg_temp.try($$CREATE FOREIGN TABLE fdw_ft (a int OPTIONS (column_name 'b')) SERVER fdw_ch$$);

-- user mappings
SELECT pg_temp.try_hint($$CREATE USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (user 'u', password 'hunter2', url 'http://h')$$);
SELECT pg_temp.try($$CREATE USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (user '', password 'hunter2')$$);
-- no mapping at all: no credentials
SELECT "user", has_password FROM dpwin_test.server_conf('fdw_ch');
-- the PUBLIC mapping applies to everyone without their own
CREATE USER MAPPING FOR PUBLIC SERVER fdw_ch OPTIONS (user 'reader');
SELECT "user", has_password FROM dpwin_test.server_conf('fdw_ch');
-- the caller's own mapping wins over PUBLIC
CREATE USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (user 'writer', password 'hunter2');
SELECT "user", has_password FROM dpwin_test.server_conf('fdw_ch');
-- an empty password is a password
ALTER USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (SET password '');
SELECT "user", has_password FROM dpwin_test.server_conf('fdw_ch');
ALTER USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (SET password 'hunter2');

-- the password is visible only where core shows it, never in dpwin
CREATE ROLE dpwin_fdw_other;
GRANT USAGE ON FOREIGN SERVER fdw_ch TO dpwin_fdw_other;
SET ROLE dpwin_fdw_other;
SELECT CASE WHEN umuser = 0 THEN 'public' WHEN usename = session_user THEN 'session user' END AS mapping,
       umoptions
  FROM pg_user_mappings WHERE srvname = 'fdw_ch' ORDER BY 1;
SELECT pg_temp.try($$SELECT * FROM dpwin_test.server_conf('fdw_ch')$$);
RESET ROLE;
SELECT count(*) AS dpwin_columns_with_secrets
  FROM information_schema.columns
 WHERE table_schema = 'dpwin' AND column_name ~ '(password|secret|credential|umoptions)';
-- no message quotes it
SELECT pg_temp.try($$ALTER USER MAPPING FOR CURRENT_USER SERVER fdw_ch OPTIONS (ADD passwd 'hunter2')$$) !~ 'hunter2' AS password_not_quoted;

-- dpwin_server_conf refuses missing servers and servers of other wrappers
CREATE FOREIGN DATA WRAPPER dpwin_fdw_test_other;
CREATE SERVER fdw_other FOREIGN DATA WRAPPER dpwin_fdw_test_other;
SELECT pg_temp.try($$SELECT * FROM dpwin_test.server_conf('fdw_other')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin_test.server_conf('fdw_missing')$$);

-- clean up
DROP SERVER fdw_other;
DROP FOREIGN DATA WRAPPER dpwin_fdw_test_other;
DROP USER MAPPING FOR PUBLIC SERVER fdw_ch;
DROP USER MAPPING FOR CURRENT_USER SERVER fdw_ch;
REVOKE USAGE ON FOREIGN SERVER fdw_ch FROM dpwin_fdw_other;
DROP ROLE dpwin_fdw_other;
DROP SERVER fdw_ch;
DROP SERVER fdw_full;

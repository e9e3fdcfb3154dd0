-- The extension installs its schema, catalog and version function.
CREATE EXTENSION IF NOT EXISTS dpwin;
SELECT dpwin.version();
SELECT extrelocatable, extnamespace::regnamespace AS schema
  FROM pg_extension WHERE extname = 'dpwin';
-- the catalog of docs/design.md
SELECT c.relname, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dpwin' AND c.relkind = 'r'
 ORDER BY 1;
-- every catalog table has a primary key
SELECT c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dpwin' AND c.relkind = 'r'
   AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                    WHERE k.conrelid = c.oid AND k.contype = 'p');
-- ordinary roles cannot write the catalog
SELECT has_table_privilege('public', 'dpwin.invocation', 'INSERT') AS public_can_insert,
       has_table_privilege('dpwin_operator', 'dpwin.route', 'UPDATE') AS operator_can_update;
-- the dpwin. GUC prefix is reserved
SET dpwin.no_such_setting = 1;
SELECT current_setting('dpwin.max_workers')::int BETWEEN 1 AND 64 AS max_workers_in_range;
-- the product installs no test-only function (those live in dpwin_test)
SELECT count(*) AS underscore_functions
  FROM pg_proc WHERE pronamespace = 'dpwin'::regnamespace AND proname LIKE '\_%';
SELECT count(*) AS dpwin_test_functions
  FROM pg_proc WHERE pronamespace::regnamespace::text = 'dpwin_test';
-- functions executable by PUBLIC are exactly the documented user interface
SELECT p.proname
  FROM pg_proc p
 WHERE p.pronamespace = 'dpwin'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1;

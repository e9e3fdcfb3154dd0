'use strict';
// client.js - the official ClickHouse JS client (@clickhouse/client, pinned
// in package-lock.json) against the local endpoint.  It does what an
// application would do and prints what it saw as one JSON object, which
// test/t/005_official_client.t checks.  Nothing here knows the endpoint is
// not a server, except the hold it asks the control port for, so that a
// statement is still running when it looks for it in system.processes.
//
// Environment: DPWIN_CH_URL, DPWIN_CH_USER, DPWIN_CH_PASSWORD,
// DPWIN_CH_CONTROL_URL, and T005_DB, a database name unique to the run.

const { createClient } = require('@clickhouse/client');

const url = process.env.DPWIN_CH_URL;
const username = process.env.DPWIN_CH_USER;
const password = process.env.DPWIN_CH_PASSWORD;
const db = process.env.T005_DB;

async function control(path) {
  const r = await fetch(process.env.DPWIN_CH_CONTROL_URL + path, { method: 'POST' });
  return (await r.text()).trim();
}

function errorOf(e) {
  return { code: e.code ?? null, type: e.type ?? null, message: String(e.message).split('\n')[0] };
}

async function rows(client, query, extra) {
  const rs = await client.query({ query, format: 'JSONEachRow', ...extra });
  return rs.json();
}

async function failure(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return errorOf(e);
  }
}

// The count of system.processes rows under query_id id.
async function listed(client, id) {
  const r = await rows(client, 'SELECT count() AS c FROM system.processes WHERE query_id = {id:String}',
    { query_params: { id } });
  return Number(r[0].c);
}

async function basics(client, out) {
  out.ping = await client.ping();
  out.rows = await rows(client, 'SELECT number AS n, toString(number) AS s FROM system.numbers LIMIT 3');
  out.params = await rows(client, 'SELECT {a:UInt32} + {b:UInt32} AS sum, {t:String} AS t',
    { query_params: { a: 40, b: 2, t: 'it\'s "quoted"\ttab' } });
  out.settings = await rows(client, "SELECT getSetting('max_threads') AS v",
    { clickhouse_settings: { max_threads: 3 } });
  const rs = await client.query({ query: 'SELECT queryID() AS q', query_id: `echo-${db}`, format: 'JSONEachRow' });
  out.echo = { query_id: rs.query_id, rows: await rs.json() };
}

async function inserts(client, out) {
  await client.command({ query: `CREATE DATABASE ${db} ENGINE = Atomic` });
  await client.command({ query: `CREATE TABLE ${db}.t (id UInt32, s String) ENGINE = MergeTree ORDER BY id` });
  await client.insert({ table: `${db}.t`, values: [{ id: 1, s: 'one' }, { id: 2, s: 'two\nlines' }], format: 'JSONEachRow' });
  out.inserted = await rows(client, `SELECT id, s FROM ${db}.t ORDER BY id`);
}

async function errors(client, out) {
  out.errors = {
    unknown_table: await failure(client.query({ query: `SELECT * FROM ${db}.missing`, format: 'JSONEachRow' })),
    syntax: await failure(client.query({ query: 'SELEC 1' })),
  };
  const bad = createClient({ url, username, password: `${password}-wrong` });
  out.errors.auth = await failure(bad.query({ query: 'SELECT 1' }));
  await bad.close();
}

// A statement the endpoint holds, found by its query_id and killed.
async function processes(client, out) {
  const held = `held-${db}`;
  await control(`/fault?mode=hold&pattern=${encodeURIComponent(`held_${db}`)}`);
  const pending = client.query({ query: `SELECT 'held_${db}' AS m`, query_id: held, format: 'JSONEachRow' })
    .then((r) => r.json())
    .then((r) => ({ rows: r }), (e) => ({ error: errorOf(e) }));
  let n = 0;
  for (let i = 0; i < 3000 && n === 0; i++)
    n = await listed(client, held);
  out.processes = n;
  await client.command({ query: 'KILL QUERY WHERE query_id = {id:String} SYNC', query_params: { id: held } });
  out.killed = await pending;
  out.after_kill = await listed(client, held);
}

async function main() {
  const client = createClient({ url, username, password, request_timeout: 120000 });
  const out = {};
  try {
    await basics(client, out);
    await inserts(client, out);
    await errors(client, out);
    await processes(client, out);
  } catch (e) {
    out.unexpected = errorOf(e);
  }
  try {
    await client.command({ query: `DROP DATABASE IF EXISTS ${db}` });
  } catch (e) {
    out.cleanup = errorOf(e);
  }
  await client.close();
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main();

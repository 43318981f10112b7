/**
 * Migration 14 (PostgreSQL): the set-based step commit (`agentry_commit_steps`, written out whole again from migration
 * 12) answers each agent as an object of its fields built once by the update that writes it, instead of the whole
 * row turned into JSON and then copied once for each column taken off it (seq, the lease's columns, and the
 * statement's own two): those copies were about a twentieth of the server's time on a fan-out. The answer is the same
 * object; nothing else changes.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 14,
  name: 'step commit answers built once',
  up: `
CREATE OR REPLACE FUNCTION agentry_commit_steps(cs jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$
  DECLARE
    ids text[];
    h_acct text[];
    h_root text[];
    h_amount bigint[];
    bad int;
    acct_ids text[];
    bals bigint[];
    k int;
    st record;
    charge bigint;
    l_acct text[] := '{}'; l_agent text[] := '{}'; l_kind text[] := '{}'; l_item text[] := '{}';
    l_tin bigint[] := '{}'; l_tout bigint[] := '{}'; l_amount bigint[] := '{}'; l_at text[] := '{}';
    l_tcw bigint[] := '{}'; l_tcr bigint[] := '{}'; l_lat bigint[] := '{}';
    l_root text[] := '{}'; l_float text[] := '{}'; l_shrink bigint[] := '{}';
    c_cn bigint[] := '{}'; c_sn bigint[] := '{}'; c_charge bigint[] := '{}';
    out jsonb;
  BEGIN
    SELECT array_agg(c->>'agent_id' ORDER BY n) INTO ids FROM jsonb_array_elements(cs) WITH ORDINALITY AS x(c, n);
    -- The same agent twice in a batch: one by one, in order.
    IF (SELECT count(DISTINCT i) FROM unnest(ids) i) <> cardinality(ids) THEN
      RETURN agentry_commit_steps_each(cs);
    END IF;
    BEGIN
      -- Settlements, in order. Holds go first (reservation rows, then their account and root sums), then each charge
      -- is min(cost, balance) against a running balance of its account, locked once.
      WITH h AS (
        DELETE FROM reservations WHERE id IN (
          SELECT s->>'reservation_id' FROM jsonb_array_elements(cs) c, jsonb_array_elements(coalesce(c->'settlements', '[]'::jsonb)) s
        ) RETURNING account_id, root_id, amount
      ) SELECT array_agg(account_id), array_agg(root_id), array_agg(amount) INTO h_acct, h_root, h_amount FROM h;
      IF h_acct IS NOT NULL THEN
        -- One statement each, in the lock order: accounts, then agents.
        UPDATE accounts a SET reserved = a.reserved - t.amount
          FROM (SELECT g, sum(x) AS amount FROM unnest(h_acct, h_amount) AS u(g, x) GROUP BY g) t WHERE a.id = t.g;
      END IF;
      SELECT array_agg(id ORDER BY id), array_agg(balance ORDER BY id) INTO acct_ids, bals FROM (
        SELECT id, balance FROM accounts WHERE id IN (
          SELECT s->'ledger'->>'account_id' FROM jsonb_array_elements(cs) c, jsonb_array_elements(coalesce(c->'settlements', '[]'::jsonb)) s
        ) ORDER BY id FOR UPDATE
      ) locked;
      FOR st IN
        SELECT cn, sn, s FROM jsonb_array_elements(cs) WITH ORDINALITY AS x(c, cn),
          jsonb_array_elements(coalesce(c->'settlements', '[]'::jsonb)) WITH ORDINALITY AS y(s, sn)
        ORDER BY cn, sn
      LOOP
        k := array_position(acct_ids, st.s->'ledger'->>'account_id');
        IF k IS NULL THEN
          charge := 0;
        ELSE
          charge := greatest(0, least((st.s->'ledger'->>'cost')::bigint, bals[k]));
          bals[k] := bals[k] - charge;
          l_acct := l_acct || (st.s->'ledger'->>'account_id');
          l_agent := l_agent || (st.s->'ledger'->>'agent_id');
          l_kind := l_kind || (st.s->'ledger'->>'kind');
          l_item := l_item || (st.s->'ledger'->>'item');
          l_tin := l_tin || (st.s->'ledger'->>'tokens_in')::bigint;
          l_tout := l_tout || (st.s->'ledger'->>'tokens_out')::bigint;
          l_tcw := l_tcw || coalesce((st.s->'ledger'->>'tokens_cache_write')::bigint, 0);
          l_tcr := l_tcr || coalesce((st.s->'ledger'->>'tokens_cache_read')::bigint, 0);
          l_lat := array_append(l_lat, (st.s->'ledger'->>'latency_ms')::bigint);
          l_amount := l_amount || (0 - charge);
          l_at := l_at || (st.s->'ledger'->>'created_at');
          l_root := l_root || (st.s->>'root_id');
          l_float := l_float || (st.s->>'float_id');
          l_shrink := l_shrink || least(charge, coalesce((st.s->>'float_amount')::bigint, 0));
        END IF;
        c_cn := c_cn || st.cn;
        c_sn := c_sn || st.sn;
        c_charge := c_charge || charge;
      END LOOP;
      IF cardinality(l_acct) > 0 THEN
        UPDATE accounts a SET balance = t.balance FROM unnest(acct_ids, bals) AS t(id, balance) WHERE a.id = t.id;
        INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at,
                            tokens_cache_write, tokens_cache_read, latency_ms)
          SELECT * FROM unnest(l_acct, l_agent, l_kind, l_item, l_tin, l_tout, l_amount, l_at, l_tcw, l_tcr, l_lat);
        -- Holds carved from a float (credit-float.ts): the float shrinks by what they cost, at most the hold.
        WITH t AS (
          SELECT f, sum(x) AS shrink FROM unnest(l_float, l_shrink) AS u(f, x) WHERE f IS NOT NULL GROUP BY f
        ), old AS (
          SELECT r.id, r.account_id, least(r.amount, t.shrink) AS d FROM reservations r JOIN t ON r.id = t.f FOR UPDATE OF r
        ), upd AS (
          UPDATE reservations r SET amount = r.amount - old.d FROM old WHERE r.id = old.id RETURNING old.account_id, old.d
        )
        UPDATE accounts a SET reserved = a.reserved - s.d
          FROM (SELECT account_id, sum(d) AS d FROM upd GROUP BY account_id) s WHERE a.id = s.account_id;
      END IF;
      -- The trees' sums: holds released, charges spent; one row version per root.
      IF h_root IS NOT NULL OR cardinality(l_root) > 0 THEN
        UPDATE agents a SET tree_reserved = a.tree_reserved - t.held, tree_spent = a.tree_spent - t.spent
          FROM (SELECT r, sum(held) AS held, sum(spent) AS spent FROM (
                  SELECT r, x AS held, 0::bigint AS spent FROM unnest(h_root, h_amount) AS u(r, x) WHERE r IS NOT NULL
                  UNION ALL
                  SELECT r, 0, x FROM unnest(l_root, l_amount) AS u(r, x) WHERE r IS NOT NULL
                ) v GROUP BY r) t
          WHERE a.agent_id = t.r;
      END IF;
      -- What agents outside the batch spent (the committing agents' own spend goes with their row update below).
      UPDATE agents a SET credits_spent = a.credits_spent - t.amount
        FROM (SELECT g, sum(x) AS amount FROM unnest(l_agent, l_amount) AS u(g, x)
              WHERE g IS NOT NULL AND NOT (g = ANY(ids)) GROUP BY g) t
        WHERE a.agent_id = t.g;

      -- The agents, locked in one order; a missing one (deleted) gets its settlements and nothing else.
      PERFORM 1 FROM agents WHERE agent_id = ANY(ids) ORDER BY agent_id FOR UPDATE;
      -- A commit whose worker lost the agent's lease sends the batch the one-by-one way, which refuses that one alone.
      SELECT count(*) INTO bad FROM jsonb_array_elements(cs) c JOIN agents a ON a.agent_id = c->>'agent_id'
        WHERE c ? 'lease' AND (a.lease_owner IS DISTINCT FROM c->'lease'->>'w' OR a.lease_epoch <> (c->'lease'->>'e')::bigint);
      IF bad > 0 THEN RAISE EXCEPTION USING ERRCODE = 'AL001'; END IF;
      -- Turns must continue each agent's log; any gap sends the batch the one-by-one way (which says whose).
      SELECT count(*) INTO bad FROM (
        SELECT c->>'agent_id' AS id, min((t->>'idx')::bigint) AS first, max((t->>'idx')::bigint) AS last, count(*) AS n
        FROM jsonb_array_elements(cs) c, jsonb_array_elements(coalesce(c->'turns', '[]'::jsonb)) t
        GROUP BY 1
      ) want
      LEFT JOIN (SELECT agent_id, count(*) AS have FROM turns WHERE agent_id = ANY(ids) GROUP BY agent_id) got
        ON got.agent_id = want.id
      WHERE want.first <> coalesce(got.have, 0) OR want.last - want.first + 1 <> want.n;
      IF bad > 0 THEN RAISE EXCEPTION USING ERRCODE = 'AGB01'; END IF;

      INSERT INTO turns (agent_id, idx, role, content, created_at)
        SELECT t->>'agent_id', (t->>'idx')::bigint, t->>'role', t->>'content', t->>'created_at'
        FROM jsonb_array_elements(cs) c, jsonb_array_elements(coalesce(c->'turns', '[]'::jsonb)) t
        WHERE EXISTS (SELECT 1 FROM agents a WHERE a.agent_id = c->>'agent_id');
      INSERT INTO messages (message_id, agent_id, role, text, timestamp)
        SELECT m->>'message_id', m->>'agent_id', m->>'role', m->>'text', m->>'timestamp'
        FROM jsonb_array_elements(cs) WITH ORDINALITY AS x(c, cn),
          jsonb_array_elements(coalesce(c->'messages', '[]'::jsonb)) WITH ORDINALITY AS y(m, mn)
        WHERE EXISTS (SELECT 1 FROM agents a WHERE a.agent_id = c->>'agent_id')
        ORDER BY cn, mn;
      INSERT INTO tool_calls (agent_id, tool_use_id, turn_idx, name, input, status, idempotent, result, is_error, updated_at)
        SELECT tc->>'agent_id', tc->>'tool_use_id', (tc->>'turn_idx')::bigint, tc->>'name', tc->>'input', tc->>'status',
          (tc->>'idempotent')::boolean, tc->>'result', (tc->>'is_error')::boolean, tc->>'updated_at'
        FROM jsonb_array_elements(cs) WITH ORDINALITY AS x(c, cn),
          jsonb_array_elements(coalesce(c->'tool_calls', '[]'::jsonb)) WITH ORDINALITY AS y(tc, tn)
        WHERE EXISTS (SELECT 1 FROM agents a WHERE a.agent_id = c->>'agent_id')
        ORDER BY cn, tn
        ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET turn_idx = EXCLUDED.turn_idx, name = EXCLUDED.name,
          input = EXCLUDED.input, status = EXCLUDED.status, idempotent = EXCLUDED.idempotent, result = EXCLUDED.result,
          is_error = EXCLUDED.is_error, updated_at = EXCLUDED.updated_at;
      -- One new row version per agent: its spend, counters, patch, lease and conditional status change together (the
      -- status change's patch wins over the step's). Its answer is built from the rows the update returns.
      WITH x AS (
        SELECT c->>'agent_id' AS id, cn, c->'patch' AS p, c->'lease' AS l,
          jsonb_array_length(coalesce(c->'messages', '[]'::jsonb)) AS nm,
          CASE WHEN jsonb_typeof(c->'status') = 'object' THEN c->'status' END AS st,
          coalesce(c->'status'->'patch', '{}'::jsonb) AS sp
        FROM jsonb_array_elements(cs) WITH ORDINALITY AS e(c, cn)
      ), spent AS (
        SELECT g, sum(x) AS amount FROM unnest(l_agent, l_amount) AS u(g, x) WHERE g IS NOT NULL GROUP BY g
      ), z AS (
        SELECT x.*, coalesce(spent.amount, 0) AS amount, a0.status AS was,
          coalesce(x.st IS NOT NULL AND a0.status IN (SELECT jsonb_array_elements_text(x.st->'from')), false) AS applies
        FROM x JOIN agents a0 ON a0.agent_id = x.id LEFT JOIN spent ON spent.g = x.id
      ), y AS (
        SELECT z.*, CASE WHEN z.applies THEN z.st->>'to' ELSE z.was END AS final FROM z
      ), u AS (
        UPDATE agents a SET
            credits_spent = a.credits_spent - y.amount,
            token_count = a.token_count + coalesce((y.p->>'token_count_delta')::bigint, 0),
            message_count = a.message_count + y.nm,
            step_count = a.step_count + coalesce((y.p->>'step_count_delta')::bigint, 0),
            updated_at = y.p->>'updated_at',
            status = y.final,
            progress = CASE WHEN y.applies AND y.sp ? 'progress' THEN (y.sp->>'progress')::double precision
              WHEN y.p ? 'progress' THEN (y.p->>'progress')::double precision ELSE a.progress END,
            status_message = CASE WHEN y.applies AND y.sp ? 'status_message' THEN y.sp->>'status_message'
              WHEN y.p ? 'status_message' THEN y.p->>'status_message' ELSE a.status_message END,
            started = CASE WHEN y.applies AND y.sp ? 'started' THEN (y.sp->>'started')::boolean ELSE a.started END,
            active_ms = CASE WHEN y.applies AND y.sp ? 'active_ms' THEN (y.sp->>'active_ms')::bigint ELSE a.active_ms END,
            active_since = CASE WHEN y.applies AND y.sp ? 'active_since' THEN y.sp->>'active_since'
              ELSE a.active_since END,
            plan = CASE WHEN y.p ? 'plan' THEN y.p->>'plan' ELSE a.plan END,
            -- Left not runnable (finished, paused): the lease goes back with the step, as a release would.
            lease_owner = CASE WHEN y.l IS NOT NULL AND y.final NOT IN ('ACTIVE', 'STARTING_UP') THEN NULL
              ELSE a.lease_owner END,
            lease_expires_at = CASE WHEN y.l IS NULL THEN a.lease_expires_at
              WHEN y.final NOT IN ('ACTIVE', 'STARTING_UP') THEN NULL
              ELSE now() + (y.l->>'ms')::bigint * interval '1 millisecond' END,
            wake_requested = CASE WHEN y.l IS NOT NULL AND y.final NOT IN ('ACTIVE', 'STARTING_UP') THEN false
              ELSE a.wake_requested END
          FROM y WHERE a.agent_id = y.id
          RETURNING a.agent_id, y.cn AS commit_no, y.applies AS status_applied,
            -- The answer's agent: its fields, built once (not the whole row with the lease's columns taken off).
            jsonb_build_object('agent_id', a.agent_id, 'account_id', a.account_id, 'parent_id', a.parent_id,
              'root_id', a.root_id, 'spawn_key', a.spawn_key, 'goal', a.goal, 'model', a.model, 'status', a.status,
              'progress', a.progress, 'status_message', a.status_message, 'token_count', a.token_count,
              'message_count', a.message_count, 'credits_spent', a.credits_spent, 'sub_agent_count',
              a.sub_agent_count, 'max_credits', a.max_credits, 'tree_spent', a.tree_spent, 'tree_reserved',
              a.tree_reserved, 'step_count', a.step_count, 'started', a.started, 'active_ms', a.active_ms,
              'active_since', a.active_since, 'plan', a.plan, 'spec', a.spec, 'created_at', a.created_at,
              'updated_at', a.updated_at, 'trace_context', a.trace_context) AS agent
      )
      SELECT jsonb_agg(jsonb_build_object('ok', true, 'value', jsonb_build_object(
          'agent', u.agent,
          'statusChanged', coalesce(u.status_applied, false),
          'charged', coalesce(ch.charged, '[]'::jsonb))) ORDER BY e.cn)
        INTO out
        FROM jsonb_array_elements(cs) WITH ORDINALITY AS e(c, cn)
        LEFT JOIN u ON u.commit_no = e.cn
        LEFT JOIN (SELECT v.cn, jsonb_agg(v.charge ORDER BY v.sn) AS charged
                   FROM unnest(c_cn, c_sn, c_charge) AS v(cn, sn, charge) GROUP BY v.cn) ch ON ch.cn = e.cn;
      RETURN out;
    EXCEPTION
      WHEN deadlock_detected OR serialization_failure THEN RAISE;
      WHEN OTHERS THEN
        -- Everything above was rolled back: one by one, each commit failing or committing on its own.
        RETURN agentry_commit_steps_each(cs);
    END;
  END
  $fn$;
`,
};

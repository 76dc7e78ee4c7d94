-- Project key budgets for one customer (docs/API.md, "Budgets"): the record of what a
-- customer's settings set (PATCH /v1/customers/{id} `key_budgets`), {key id: {limit,
-- period}}. Redis enforces them (lua/includes/budget.lua): each is copied into the
-- customer's meta hash as `bud_pk:<key id>`, and a recovery rebuilds them from here; the
-- period's counters live in Redis only. Null when none was ever set.
ALTER TABLE customers ADD COLUMN key_budgets jsonb CHECK (key_budgets IS NULL OR jsonb_typeof(key_budgets) = 'object');

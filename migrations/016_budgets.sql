-- Spending budgets (docs/API.md, "Budgets"): the record of what is set. Redis enforces
-- them (lua/includes/budget.lua): a customer's limit and period are copied into its meta
-- hash (PATCH /v1/customers/{id}, and a recovery rebuilds them from here); a
-- customer-scoped key's travel with its key record. Both columns are null when no budget
-- is set; the period's counters live in Redis only.
ALTER TABLE customers
  ADD COLUMN budget_limit bigint CHECK (budget_limit > 0),
  ADD COLUMN budget_period text CHECK (budget_period IN ('day', 'week', 'month', 'total')),
  ADD CONSTRAINT customers_budget_whole CHECK ((budget_limit IS NULL) = (budget_period IS NULL));

ALTER TABLE api_keys
  ADD COLUMN budget_limit bigint CHECK (budget_limit > 0),
  ADD COLUMN budget_period text CHECK (budget_period IN ('day', 'week', 'month', 'total')),
  ADD CONSTRAINT api_keys_budget_whole CHECK ((budget_limit IS NULL) = (budget_period IS NULL)),
  ADD CONSTRAINT api_keys_budget_customer CHECK (budget_limit IS NULL OR type = 'customer');

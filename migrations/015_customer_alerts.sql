-- A customer's balance alert and auto top-up settings (PATCH /v1/customers/{id}):
-- {"low_balance_threshold": credits | null, "auto_top_up": {"below", "amount",
-- "monthly_limit"} | null}, NULL when neither is set. The scripts read a copy in the
-- customer's Redis meta hash (`al`, src/customers/alerts.ts); reconcile's fold writes it
-- back from here.
ALTER TABLE customers ADD COLUMN alert_settings jsonb;

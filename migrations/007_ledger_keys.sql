-- The ledger's keys follow how it is written and read: one customer's entries in seq
-- order. The primary key becomes (project_id, customer_id, seq), which was already
-- unique: the persist loop appends each customer's entries at the end of its range, and
-- reads of a customer's ledger (pages by seq, reconcile's fold) walk the table's primary
-- index. The entry id stays unique: inserts skip an entry already written by its id
-- (ON CONFLICT (id)), so that a repeated batch is a no-op while an entry that takes
-- another's seq is refused (the persist loop's seq clash, on ledger_entries_pkey).
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_project_id_customer_id_seq_key;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (project_id, customer_id, seq);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_id_key UNIQUE (id);

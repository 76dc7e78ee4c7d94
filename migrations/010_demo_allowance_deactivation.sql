-- The demo's allowance, and deactivated projects.
--
-- The demo organisation that `npm start` makes stays on the Free plan (its upgrade path
-- can be tried), but with room to try every feature at once: more projects, keys per
-- project and members than Free allows (src/plans/catalogue.ts, demo_allowance). It is
-- marked here, never inferred from a name at request time. A demo made before this
-- migration is marked by what only the demo has: its name and its owner's address.
ALTER TABLE organizations ADD COLUMN demo_allowance boolean NOT NULL DEFAULT false;
UPDATE organizations o SET demo_allowance = true
WHERE o.name = 'Demo organization'
  AND EXISTS (SELECT 1 FROM members m WHERE m.organization_id = o.id AND lower(m.email) = 'owner@demo.example');

-- A project is deactivated, never deleted: its customers' ledger, sources, usage records
-- and invoices are money records that stay readable. Its keys are revoked at the same time.
ALTER TABLE projects ADD COLUMN deactivated_at timestamptz;

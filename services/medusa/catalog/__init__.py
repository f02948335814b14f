"""The catalog (Medusa's Lookup): who takes part, what runs where, and on what terms."""

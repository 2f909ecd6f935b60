"""Main-lane tests of the vendor plugins: detection, reasons and tables (no vendor hardware needed)."""

"""Snapshot -> Plan, pure."""

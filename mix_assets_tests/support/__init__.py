"""Test support: fixtures, fakes and builders shared by the tests (servers, mixes, configs, the UI harness)."""

"""Reference data shipped with hpcsolve (copied from ../shared/reference/)."""

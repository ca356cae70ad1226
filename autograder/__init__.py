"""Grading side of the course: blank markers, release, hidden tests, diagnosis."""

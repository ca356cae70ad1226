"""Reading the course's source: what both sides of the course import.

- `paths.py`: where the course is (its root, `solutions/`, `grading/`) and which assignments
  have a solved source.
- `cells.py`: the `# %%` cells of a solved source (read without jupytext), its solution cells,
  and the released code of each exercise.
- `markers.py`: the blank markers (`# BLANK`, `# ACCEPT`, `# REJECT`) and what they blank.
- `definitions.py`: what a cell defines (its functions and classes, their source).
- `changes.py`: where a learner's function was changed outside its blanks.

The learner's side (distlab's drills and notices) and the grading side (autograder: release,
grading, the judge, the strength check) both read the course through these modules. They
import nothing of autograder: distlab is the lower layer (`lint-imports` checks it).
"""

"""The class report (`make report`): which blanks, which ideas, the class missed.

    python -m autograder.report [assignment ...] [--names] [--worst N]

After `make grade`, for each assignment with graded submissions: grading/reports/<id>.html
(per blank the share of students who lost it, the worst blanks' commonest wrong answers, per
exercise the share of full marks, a chart, the students to look at) and a short summary on
stdout. It reads the gradebook and the autograded notebooks (collect.py); nothing is run
again. Students are anonymous labels unless `--names` is given.
"""

"""`make grade`: grade a class in parallel. cli.py hands submissions to slots, one long-lived
nbgrader worker (worker.py) per slot; the judge (autograder/judge/) decides every grade."""

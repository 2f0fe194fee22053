# Conveniences over tasks.py (which needs only Python 3.11+).
.PHONY: demo test test-lowest bench
demo:
	python3 tasks.py demo
test:
	python3 tasks.py test
bench:
	python3 tasks.py bench
test-lowest:
	python3 tasks.py test-lowest

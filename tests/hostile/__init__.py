"""Hostile input, as a careful attacker and a careless user would try it (issue 11).

Each test gives the hostile input and the exact outcome.
"""

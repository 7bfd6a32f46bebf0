"""Adapters that let other frameworks keep their API and store through tether.

Each adapter lives in a subpackage that imports its framework, so importing
``tether`` or ``tether.integrations`` never pulls one in.
"""

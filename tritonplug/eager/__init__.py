"""Eager calls made again: the memo of call specs, one definition of "the same call" (a table of the argument kinds
it accepts, from which its keys and its guards are written) and the generated functions that recognise a repeat
(each kernel's runner). The only package whose modules run code they wrote (``generated.py``). Internal: no stable
import path.
"""

"""The oracle the receiver's sanitising is checked against: the rules walked over the decoded message.

The receiver has one engine for "what in a push is invalid": the native scan (kct.receiver._otlpscan, C),
whose report kct.receiver.sanitize applies to the decoded message by position. This package decides the
same another way, in Python over the decoded message (`sanitize_walk.walk`), sharing only the result type
(`SanitizeResult`) and the privacy filter (`kct.receiver.privacy`, the one owner of which keys are private).

tests/unit/receiver/test_receiver_native_scan.py compares the two bit for bit (the message left, the
points kept and rejected, the metrics and attributes dropped, the reasons) on the fuzz seeds and thousands
of wire-level mutations of them. The walk was the receiver's own engine for every push that needed a
change, until the scan learnt to report what to drop.
"""

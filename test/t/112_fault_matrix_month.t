# The fault matrix on a month-partitioned target, in both query_id modes
# (test/lib/DpwinMatrix.pm lists the cases; DPWIN_FAULT_MATRIX=slice runs
# about half of them).  Every case is one faulted refresh ending with the
# target exactly the old or the new generation and recover() converging.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinMatrix;

run_matrix('month', "t112_$$");
done_testing();

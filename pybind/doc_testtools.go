package pybind

// The exports in testtools_*.go (InspectFile, DescribeIVF, WriteTestFile,
// InspectHNSW, ReadVectors, DamageSegment, RemapRowAddresses) are tools for the test suite
// and for people debugging an index file: they read single files, write
// test files, or damage a segment on purpose. They are compiled only with
// the build tag segmerge_testtools, which `make build` sets for the tests
// (tools/build_native.py --tags); wheels and the sdist build without it,
// so the production extension does not carry them.

{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJiZjEzNTZkYjgzZTljNjBjODAwNTc1MGZkNzIxMzFiNmVjOWIzMGM1MjM0ZDJmMzI2MTI2MjZkN2M2ZDQ3OGNjIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1lYWdlci55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "sHB/P7Ae1+lAdiJQS5PYPWyqG8pr4K8f/mVvi4L19ZdB7tUSfeRIEsUHItyZkLSF5K/6f54Y0HnTUExhqRnACg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
